package mesh

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// Text fields are never changed without a word, as tag values are not (see
// TestDecodeTagValuesNeverAltered): YAML 1.1 reads `name: y` as true and `name: n` as false,
// `name: 010` as 8. Such a name (or parameter name, label, mesh...) is refused with the text
// written and how to quote it; plain text and values YAML reads as written are kept.
func TestDecodeTextFieldsNeverAltered(t *testing.T) {
	vo := func(name, params, labels string) string {
		return "type: VirtualOutbound\nmesh: default\nname: " + name + "\n" + labels +
			"selectors:\n- match: {kuma.io/service: \"*\"}\nconf:\n  host: \"{{.s}}.mesh\"\n  port: 8080\n  parameters:\n  - {name: s, tagKey: kuma.io/service}\n" + params
	}
	for _, tc := range []struct {
		name, doc string
		errs      []string // each a line of the error
		check     func(Resource) string
	}{
		{"name y", vo("y", "", ""), []string{
			`f.yaml#1: virtualoutbound "y": name: YAML reads this value as a boolean true, not the text written: quote it (name: "y") (value "y")`}, nil},
		{"name On", vo("On", "", ""), []string{
			`f.yaml#1: virtualoutbound "On": name: YAML reads this value as a boolean true, not the text written: quote it (name: "On") (value "On")`}, nil},
		{"name 010", vo("010", "", ""), []string{
			`f.yaml#1: virtualoutbound "010": name: YAML reads this value as a number 8, not the text written: quote it (name: "010") (value "010")`}, nil},
		{"parameter name n", strings.Replace(vo("vo", "  - {name: n, tagKey: version}\n", ""), `{{.s}}.mesh`, `{{.n}}.{{.s}}.mesh`, 1), []string{
			`f.yaml#1: virtualoutbound "vo": conf.parameters[1].name: YAML reads this value as a boolean false, not the text written: quote it (name: "n") (value "n")`}, nil},
		{"mesh off", strings.Replace(vo("vo", "", ""), "mesh: default", "mesh: off", 1), []string{
			`f.yaml#1: virtualoutbound "vo": mesh: YAML reads this value as a boolean false, not the text written: quote it (mesh: "off") (value "off")`}, nil},
		{"label no", vo("vo", "", "labels:\n  team: no\n"), []string{
			`f.yaml#1: virtualoutbound "vo": labels.team: YAML reads this value as a boolean false, not the text written: quote it (team: "no") (value "no")`}, nil},
		{"kept: numbers and booleans written as YAML reads them", vo("10", "", "labels:\n  replicas: 3\n  canary: true\n"), nil,
			func(r Resource) string {
				m := r.GetMeta()
				if m.Name != "10" || m.Labels()["replicas"] != "3" || m.Labels()["canary"] != "true" {
					return "changed: " + m.Name + " " + m.Labels()["replicas"] + " " + m.Labels()["canary"]
				}
				if r.(*VirtualOutbound).Conf.Port != "8080" {
					return "port changed: " + r.(*VirtualOutbound).Conf.Port
				}
				return ""
			}},
		{"kept: quoted", vo(`"y"`, "", "labels:\n  team: 'no'\n"), nil,
			func(r Resource) string {
				if m := r.GetMeta(); m.Name != "y" || m.Labels()["team"] != "no" {
					return "changed: " + m.Name + " " + m.Labels()["team"]
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Decode("f.yaml", []byte(tc.doc))
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if strings.Join(got, "\n") != strings.Join(tc.errs, "\n") {
				t.Fatalf("errors\n got %q\nwant %q", got, tc.errs)
			}
			if tc.check != nil {
				if len(rs) != 1 {
					t.Fatalf("%d resources", len(rs))
				}
				if msg := tc.check(rs[0]); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

// A resource in the Kubernetes form carries its namespace as Kuma's k8s.kuma.io/namespace
// label, as Kuma's control plane labels it: HostnameGenerator's {{ .Namespace }} and
// matchLabels on k8s.kuma.io/namespace see it. A label written keeps its value.
func TestKubernetesNamespaceLabel(t *testing.T) {
	mes := "apiVersion: kuma.io/v1alpha1\nkind: MeshExternalService\nmetadata:\n  name: httpbin\n  namespace: kuma-system\n%s" +
		"spec:\n  match: {type: HostnameGenerator, port: 80, protocol: http}\n  endpoints:\n  - {address: httpbin.org, port: 80}\n"
	for _, tc := range []struct{ labels, want string }{
		{"", "kuma-system"},
		{"  labels: {kuma.io/mesh: default}\n", "kuma-system"},
		{"  labels: {k8s.kuma.io/namespace: other}\n", "other"},
	} {
		rs, err := Decode("f.yaml", []byte(strings.Replace(mes, "%s", tc.labels, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if got := rs[0].GetMeta().Labels()[NamespaceLabel]; got != tc.want {
			t.Errorf("labels %q: %s = %q, want %q", tc.labels, NamespaceLabel, got, tc.want)
		}
	}
	// The universal form has no namespace: no label is made up.
	rs, err := Decode("f.yaml", []byte("type: MeshExternalService\nname: httpbin\nmesh: default\nspec:\n  match: {port: 80, protocol: http}\n  endpoints:\n  - {address: httpbin.org, port: 80}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := rs[0].GetMeta().Labels()[NamespaceLabel]; ok {
		t.Errorf("universal form: %s = %q, want none", NamespaceLabel, got)
	}
}

// Duplicate keys are an error in JSON as in YAML: encoding/json keeps the last silently, so
// {"kuma.io/service": "a", "kuma.io/service": "b"} selected b without a word.
func TestDecodeJSONDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ name, doc, err string }{
		{"top level", `{"type":"VirtualOutbound","name":"x","name":"y"}`, `key "name" already set in map`},
		{"in tags", `{"type":"Dataplane","mesh":"default","name":"d","networking":{"address":"10.0.0.1","inbound":[{"port":80,"tags":{"kuma.io/service":"a","kuma.io/service":"b"}}]}}`,
			`key "kuma.io/service" already set in map`},
		{"in an array of documents", `[{"type":"Dataplane","type":"Dataplane"}]`, `key "type" already set in map`},
	} {
		_, err := Decode("f.json", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
	// The same key in different objects, keys that are values, escaped quotes, and an object
	// of many keys are fine.
	var many strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&many, `,"k%d":"v"`, i)
	}
	ok := `[{"type":"Dataplane","mesh":"default","name":"name","labels":{"a\"b":"type","name":"x"` + many.String() + `},` +
		`"networking":{"address":"10.0.0.1","inbound":[{"port":80,"tags":{"kuma.io/service":"a"}},{"port":81,"tags":{"kuma.io/service":"b"}}]}}]`
	if rs, err := Decode("f.json", []byte(ok)); err != nil || len(rs) != 1 {
		t.Errorf("no duplicate: %d resources, %v", len(rs), err)
	}
}

// Every problem of a VirtualOutbound's templates at once: a port out of range hid that the
// host renders no hostname, and a host rendering none hid a port rendering no port.
func TestVirtualOutboundHostAndPortProblemsAtOnce(t *testing.T) {
	vo := func(host, port string) string {
		return "type: VirtualOutbound\nmesh: default\nname: v\nselectors: [{match: {kuma.io/service: \"*\"}}]\nconf:\n  host: '" + host +
			"'\n  port: '" + port + "'\n  parameters: [{name: s, tagKey: kuma.io/service}]\n"
	}
	for _, tc := range []struct {
		host, port string
		want       []string
	}{
		{"{{.s}}..mesh", "70000", []string{
			`f.yaml#1: virtualoutbound "v": conf.port: template: port must be 1-65535 (value "70000")`,
			`f.yaml#1: virtualoutbound "v": conf.host: renders an invalid value with stand-in tag values: empty label (value "a1..mesh")`}},
		{"{{.s}}..mesh", "{{.s}}x", []string{
			`f.yaml#1: virtualoutbound "v": conf.host: renders an invalid value with stand-in tag values: empty label (value "a1..mesh")`,
			`f.yaml#1: virtualoutbound "v": conf.port: renders an invalid value with stand-in tag values: not a port 1-65535 (value "80x")`}},
	} {
		_, err := Decode("f.yaml", []byte(vo(tc.host, tc.port)))
		var got []string
		if err != nil {
			got = strings.Split(err.Error(), "\n")
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("host %q port %q: errors\n got %q\nwant %q", tc.host, tc.port, got, tc.want)
		}
	}
}

// A file's problems are listed up to MaxFileErrors, then decoding it stops, saying so: 1.8 MB
// of junk documents (300,000 of `x`) took 17 s and 228 MB and printed 31 MB of errors, at
// every reload. A file's resources are refused as soon as it has one problem anyway.
func TestDecodeStopsAfterManyProblems(t *testing.T) {
	_, err := Decode("f.yaml", []byte(strings.Repeat("---\nx\n", 300000)))
	errs, _ := err.(Errors)
	if len(errs) != MaxFileErrors+1 {
		t.Fatalf("%d errors, want %d and a last saying decoding stopped", len(errs), MaxFileErrors+1)
	}
	if last := errs[len(errs)-1].Error(); last != fmt.Sprintf("f.yaml#%d: decoding stopped after %d problems: fix those first", MaxFileErrors+1, MaxFileErrors) {
		t.Errorf("last error %q", last)
	}
	// A JSON list of documents too.
	_, err = Decode("f.json", []byte("["+strings.Repeat(`{"x":1},`, 1000)+`{"x":1}]`))
	if errs, _ := err.(Errors); len(errs) != MaxFileErrors+1 {
		t.Errorf("a JSON list: %d errors, want %d", len(errs), MaxFileErrors+1)
	}
	// Fewer problems are all listed, the good documents returned.
	rs, err := Decode("f.yaml", []byte(strings.Repeat("---\nx\n", MaxFileErrors-1)+"---\n"+dpA))
	if errs, _ := err.(Errors); len(errs) != MaxFileErrors-1 || len(rs) != 1 {
		t.Errorf("%d errors and %d resources, want %d and 1", len(errs), len(rs), MaxFileErrors-1)
	}
}

// One document's problems are bounded the same way: 300,000 unknown fields in one document
// took 261 MB and printed 36 MB.
func TestDecodeStopsAfterManyProblemsInOneDocument(t *testing.T) {
	var b strings.Builder
	b.WriteString("type: VirtualOutbound\nname: v\n")
	for i := range 20000 {
		fmt.Fprintf(&b, "k%d: 1\n", i)
	}
	_, err := Decode("f.yaml", []byte(b.String()))
	errs, _ := err.(Errors)
	if len(errs) != MaxFileErrors+1 {
		t.Fatalf("%d errors, want %d and a last saying decoding stopped", len(errs), MaxFileErrors+1)
	}
	if last := errs[len(errs)-1].Error(); last != fmt.Sprintf("f.yaml#1: decoding stopped after %d problems: fix those first", MaxFileErrors) {
		t.Errorf("last error %q", last)
	}
}

// Duplicate names are listed up to MaxFileErrors, then counted: 100,000 copies of one
// VirtualOutbound printed 99,999 lines (10 MB).
func TestDuplicateNamesBounded(t *testing.T) {
	doc := "---\ntype: VirtualOutbound\nmesh: default\nname: v\nselectors: [{match: {kuma.io/service: a}}]\nconf: {host: a.mesh, port: 80}\n"
	rs, err := Decode("f.yaml", []byte(strings.Repeat(doc, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := Decode("dp.yaml", []byte(dpA))
	_, err = NewSnapshot(self[0].(*Dataplane), rs)
	errs, _ := err.(Errors)
	if len(errs) != MaxFileErrors+1 {
		t.Fatalf("%d errors, want %d and a count of the others", len(errs), MaxFileErrors+1)
	}
	if last := errs[len(errs)-1].Error(); last != "899 more resources of a duplicate name, not listed" {
		t.Errorf("last error %q", last)
	}
}

// List elements too: reachableServices: [on, 010] read as true and 8 named services nobody
// wrote.
func TestDecodeListTextNeverAltered(t *testing.T) {
	dp := func(list string) string {
		return dpA + "  transparentProxying:\n    reachableServices: " + list + "\n"
	}
	for _, tc := range []struct{ list, err string }{
		{"[on]", `f.yaml#1: dataplane "a": networking.transparentProxying.reachableServices[0]: YAML reads this value as a boolean true, not the text written: quote it ("on") (value "on")`},
		{"\n    - redis\n    - 010", `f.yaml#1: dataplane "a": networking.transparentProxying.reachableServices[1]: YAML reads this value as a number 8, not the text written: quote it ("010") (value "010")`},
		{"[redis, 10, true]", ``},
		{`["on", 'off']`, ``},
	} {
		_, err := Decode("f.yaml", []byte(dp(tc.list)))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("%s: error\n got %q\nwant %q", tc.list, got, tc.err)
		}
	}
}

// Checking numbers and booleans against the text written costs one pass over a document,
// not one per value: a dataplane of 20,000 numeric tags (300 KB) took 550 s to decode.
func TestDecodeManyNumericValuesLinear(t *testing.T) {
	doc := func(n int) []byte {
		var b strings.Builder
		b.WriteString(strings.TrimSuffix(dpA, "\n") + "\n")
		for i := range n {
			fmt.Fprintf(&b, "      k%d: %d\n", i, i)
		}
		b.WriteString("  transparentProxying:\n    reachableServices:\n")
		for i := range n {
			fmt.Fprintf(&b, "    - %d\n", i)
		}
		return []byte(b.String())
	}
	// The fastest of five decodes of a document and of one 8 times as large, taken in turn
	// so that a busy machine slows both alike: linear work takes about 8 times as long, the
	// per-value scan of the whole document this guards against 64 times (and the small
	// document alone seconds). A ratio of the two, not a duration.
	decode := func(d []byte) time.Duration {
		start := time.Now()
		rs, err := Decode("f.yaml", d)
		if err != nil || len(rs) != 1 {
			t.Fatalf("%d resources, %v", len(rs), err)
		}
		return time.Since(start)
	}
	smallDoc, largeDoc := doc(2500), doc(20000)
	small, large := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 5 {
		small = min(small, decode(smallDoc))
		large = min(large, decode(largeDoc))
	}
	t.Logf("ratio %.1f (%v, %v)", float64(large)/float64(small), small, large)
	if ratio := float64(large) / float64(small); ratio > 32 {
		t.Errorf("8 times the values took %.1f times as long (%v, %v): not linear", ratio, small, large)
	}
	rs, _ := Decode("f.yaml", doc(20000))
	if got := rs[0].(*Dataplane).Networking.Inbound[0].Tags.Value("k19999"); got != "19999" {
		t.Errorf("k19999 = %q", got)
	}
}

// `kubectl get dataplanes,meshexternalservices -A -o yaml` writes a List whose items are
// the resources: each item is read as a document (numbered as a JSON array's elements).
func TestDecodeKubernetesList(t *testing.T) {
	item := func(name, ns string) string {
		return "- apiVersion: kuma.io/v1alpha1\n  kind: Dataplane\n  mesh: default\n  metadata: {name: " + name + ", namespace: " + ns +
			"}\n  spec:\n    networking:\n      address: 10.5.0.1\n      inbound:\n      - port: 6379\n        tags: {kuma.io/service: redis}\n"
	}
	doc := "apiVersion: v1\nkind: List\nitems:\n" + item("redis-0", "ns1") + item("redis-0", "ns2") + "metadata:\n  resourceVersion: \"\"\n"
	rs, err := Decode("f.yaml", []byte(doc+"---\n"+dpA))
	if err != nil || resourceNames(rs) != "redis-0.ns1,redis-0.ns2,a" {
		t.Fatalf("resources %s, %v", resourceNames(rs), err)
	}
	_, err = Decode("f.yaml", []byte(strings.Replace(doc, "port: 6379", "port: 0", 1)))
	if err == nil || !strings.HasPrefix(err.Error(), `f.yaml#1: dataplane "redis-0.ns1": spec.networking.inbound[0].port: required`) {
		t.Errorf("error %v, want the first item named", err)
	}
	_, err = Decode("f.yaml", []byte("apiVersion: v1\nkind: DataplaneList\nitems: {a: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "items: expected a list") {
		t.Errorf("items not a list: %v", err)
	}
}

// YAML reads .inf and .nan as numbers JSON has no words for: the document's error names
// the line and the value, and how to write it as text.
func TestDecodeInfinityNamed(t *testing.T) {
	doc := "type: VirtualOutbound\nmesh: default\nname: v\nselectors: [{match: {kuma.io/service: \"*\"}}]\nconf:\n  host: \"{{.s}}.mesh\"\n  port: .Inf\n"
	_, err := Decode("f.yaml", []byte("---\n"+doc))
	want := `f.yaml#1: invalid YAML/JSON: line 8: YAML reads .Inf as a number JSON cannot hold (+Inf): quote it (".Inf")`
	if err == nil || err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
}
