package mesh

import (
	"strings"
	"testing"
)

const dpA = "type: Dataplane\nmesh: default\nname: a\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: a\n"
const dpB = "type: Dataplane\nmesh: default\nname: b\nnetworking:\n  address: 10.0.0.2\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: b\n"

func resourceNames(rs []Resource) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetMeta().Name)
	}
	return strings.Join(out, ",")
}

// Nothing dropped, nothing changed without a word: each stream decodes to every document
// written, exactly as written, or says why not.
func TestDecodeNothingLostOrChanged(t *testing.T) {
	flow := func(n, ip string) string {
		return "--- {type: Dataplane, mesh: default, name: " + n + ", networking: {address: " + ip + ", inbound: [{port: 80, tags: {kuma.io/service: " + n + "}}]}}\n"
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"flow mappings after the markers", flow("a", "10.0.0.1") + flow("b", "10.0.0.2"), "a,b"},
		{"a document after ... without ---", dpA + "...\n" + dpB, "a,b"},
		{"... then ---", dpA + "...\n---\n" + dpB, "a,b"},
		{"JSON documents", `{"type": "Dataplane", "mesh": "default", "name": "a", "networking": {"address": "10.0.0.1", "inbound": [{"port": 80, "tags": {"kuma.io/service": "a"}}]}}` + "\n---\n" + dpB, "a,b"},
	} {
		rs, err := Decode("f.yaml", []byte(tc.doc))
		if err != nil || resourceNames(rs) != tc.want {
			t.Errorf("%s: got %q (err %v), want %q", tc.name, resourceNames(rs), err, tc.want)
		}
	}
}

func TestDecodeBlockScalarUntouched(t *testing.T) {
	doc := "type: VirtualOutbound\nmesh: default\nname: vo\nlabels:\n  note: |\n    host: {{ name }}.mesh\n    port: {{ port }}\nselectors:\n- match:\n    kuma.io/service: '*'\nconf:\n  host: '{{.service}}.mesh'\n  port: '80'\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n"
	rs, err := Decode("f.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs[0].GetMeta().Labels()["note"]; got != "host: {{ name }}.mesh\nport: {{ port }}\n" {
		t.Fatalf("block scalar changed: %q", got)
	}
}

// A tag value YAML would read as a number or a boolean is kept exactly as written when that
// is what YAML reads (port: 1800), refused with the text otherwise.
func TestDecodeTagValuesNeverAltered(t *testing.T) {
	tagged := func(tags string) string {
		return strings.Replace(dpA, "      kuma.io/service: a\n", "      kuma.io/service: a\n"+tags, 1)
	}
	for _, tc := range []struct{ tags, want, err string }{
		{"      port: 1800\n", "1800", ""},
		{"      version: \"1.10\"\n", "1.10", ""},
		{"      enabled: true\n", "true", ""},
		{"      version: 1.10\n", "", `tags.version: YAML reads this tag value as a number 1.1, not the text written: quote it (version: "1.10") (value "1.10")`},
		{"      build: 010\n", "", `tags.build: YAML reads this tag value as a number 8, not the text written: quote it (build: "010")`},
		{"      canary: yes\n", "", `tags.canary: YAML reads this tag value as a boolean true, not the text written: quote it (canary: "yes")`},
	} {
		rs, err := Decode("f.yaml", []byte(tagged(tc.tags)))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.tags, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.tags, err)
			continue
		}
		for _, tg := range rs[0].(*Dataplane).Networking.Inbound[0].Tags {
			if k, v := tg.Key, tg.Value; k != ServiceTag && v != tc.want {
				t.Errorf("%q: %s = %q, want %q", tc.tags, k, v, tc.want)
			}
		}
	}
	// JSON numbers are kept as written
	rs, err := Decode("f.json", []byte(`{"type": "Dataplane", "mesh": "default", "name": "a", "networking": {"address": "10.0.0.1", "inbound": [{"port": 80, "tags": {"kuma.io/service": "a", "version": 1.10}}]}}`))
	if err != nil || rs[0].(*Dataplane).Networking.Inbound[0].Tags.Value("version") != "1.10" {
		t.Fatalf("JSON number tag: %v %v", err, rs)
	}
}

// Every error of a MeshExternalService at once: a problem in clientCert does not hide that
// clientKey is missing.
func TestMESAllErrorsAtOnce(t *testing.T) {
	doc := "type: MeshExternalService\nname: m\nmesh: default\nspec:\n  match:\n    port: 443\n  endpoints:\n  - address: example.com\n    port: 443\n  tls:\n    enabled: true\n    verification:\n      clientCert:\n        inline: '!!not base64'\n"
	_, err := Decode("f.yaml", []byte(doc))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"spec.tls.verification.clientCert.inline: not base64-encoded text", "spec.tls.verification.clientKey: required with clientCert"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}

// Kuma's documented Dataplane fields are accepted, even those the agent does not act on.
func TestDecodeKumaDataplaneFields(t *testing.T) {
	doc := dpA + "  admin:\n    port: 9901\nmetrics:\n  type: prometheus\nprobes:\n  port: 9000\n"
	doc = strings.Replace(doc, "    tags:\n      kuma.io/service: a\n", "    name: http\n    serviceProbe:\n      tcp: {}\n    health:\n      ready: true\n    state: Ready\n    tags:\n      kuma.io/service: a\n", 1)
	gateway := "type: Dataplane\nmesh: default\nname: gw\nnetworking:\n  address: 10.0.0.9\n  admin:\n    port: 9901\n" +
		"  gateway:\n    type: BUILTIN\n    tags:\n      kuma.io/service: gw\nmetrics:\n  type: prometheus\n"
	if _, err := Decode("dp.yaml", []byte(doc+"---\n"+gateway)); err != nil {
		t.Fatalf("Kuma's fields refused: %v", err)
	}
	// As in Kuma, a dataplane is a gateway or has inbounds, not both.
	both := strings.Replace(doc, "  admin:\n", "  gateway:\n    type: DELEGATED\n    tags:\n      kuma.io/service: gw\n  admin:\n", 1)
	if _, err := Decode("both.yaml", []byte(both)); err == nil || !strings.Contains(err.Error(), "give inbounds or gateway, not both") {
		t.Fatalf("inbounds beside a gateway: %v", err)
	}
}
