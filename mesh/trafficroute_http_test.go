package mesh

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// A Kuma TrafficRoute with conf.http, universal form.
const kumaRouteHTTP = `type: TrafficRoute
name: api-routes
mesh: default
sources:
  - match:
      kuma.io/service: '*'
destinations:
  - match:
      kuma.io/service: backend
conf:
  http:
  - match:
      method:
        exact: GET
      path:
        prefix: /api
      headers:
        x-canary:
          exact: "true"
    modify:
      path:
        rewritePrefix: /v2/api
      host:
        value: api.internal
      requestHeaders:
        add:
        - name: x-routed
          value: "yes"
          append: true
        remove:
        - name: x-debug
      responseHeaders:
        add:
        - name: x-served-by
          value: canary
    split:
    - weight: 90
      destination:
        kuma.io/service: backend
        version: v2
    - weight: 10
      destination:
        kuma.io/service: backend
        version: v1
  - match:
      path:
        regex: ^/users/[0-9]+$
    modify:
      path:
        regex:
          pattern: ^/users/([0-9]+)$
          substitution: /people/\1
      host:
        fromPath:
          pattern: ^/users/([0-9]+)$
          substitution: u\1.internal
    destination:
      kuma.io/service: users
  - match:
      headers:
        x-empty:
          exact: ""
    destination:
      kuma.io/service: '*'
  destination:
    kuma.io/service: backend
`

// The same route in the Kubernetes form.
var kumaRouteHTTPK8s = func() string {
	body := kumaRouteHTTP[strings.Index(kumaRouteHTTP, "sources:"):]
	var b strings.Builder
	b.WriteString("apiVersion: kuma.io/v1alpha1\nkind: TrafficRoute\nmesh: default\nmetadata:\n  name: api-routes\nspec:\n")
	for _, l := range strings.SplitAfter(body, "\n") {
		if l != "" {
			b.WriteString("  " + l)
		}
	}
	return b.String()
}()

func strp(s string) *string { return &s }

// conf.http reads into TrafficRoute.HTTP in both of Kuma's forms, every field kept.
func TestKumaTrafficRouteHTTP(t *testing.T) {
	var first *TrafficRoute
	for _, doc := range []string{kumaRouteHTTP, kumaRouteHTTPK8s} {
		rs, err := Decode("http.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		tr := rs[0].(*TrafficRoute)
		if len(tr.Conf) != 1 || tr.Conf[0].Destination.Value(ServiceTag) != "backend" || len(tr.HTTP) != 3 {
			t.Fatalf("conf %+v, http %+v", tr.Conf, tr.HTTP)
		}
		r0 := tr.HTTP[0]
		want0 := HTTPRule{
			Match: HTTPMatch{Method: &StringMatcher{Exact: strp("GET")}, Path: &StringMatcher{Prefix: strp("/api")},
				Headers: map[string]StringMatcher{"x-canary": {Exact: strp("true")}}},
			Modify: &HTTPModify{
				Path: &HTTPPathRewrite{RewritePrefix: "/v2/api"},
				Host: &HTTPHostRewrite{Value: "api.internal"},
				RequestHeaders: &HTTPHeaderChange{Add: []HTTPHeaderAdd{{Name: "x-routed", Value: "yes", Append: true}},
					Remove: []HTTPHeaderRemove{{Name: "x-debug"}}},
				ResponseHeaders: &HTTPHeaderChange{Add: []HTTPHeaderAdd{{Name: "x-served-by", Value: "canary"}}},
			},
			Split: []WeightedDestination{
				{Weight: 90, Destination: Tags{{Key: ServiceTag, Value: "backend"}, {Key: "version", Value: "v2"}}},
				{Weight: 10, Destination: Tags{{Key: ServiceTag, Value: "backend"}, {Key: "version", Value: "v1"}}},
			},
		}
		if !reflect.DeepEqual(r0, want0) {
			got, _ := json.Marshal(r0)
			want, _ := json.Marshal(want0)
			t.Errorf("rule 0:\n got %s\nwant %s", got, want)
		}
		r1 := tr.HTTP[1]
		if k, v := r1.Match.Path.Kind(); k != "regex" || v != `^/users/[0-9]+$` || r1.Modify.Path.Regex.Substitution != `/people/\1` ||
			r1.Modify.Host.FromPath.Substitution != `u\1.internal` || r1.Destination.Value(ServiceTag) != "users" || r1.Split != nil {
			t.Errorf("rule 1: %+v", r1)
		}
		if k, v := tr.HTTP[2].Match.Headers["x-empty"].Kind(); k != "exact" || v != "" {
			t.Errorf("rule 2: an empty exact header value reads as %q %q", k, v)
		}
		if first == nil {
			first = tr
		} else if !reflect.DeepEqual(first.HTTP, tr.HTTP) {
			t.Errorf("the Kubernetes form reads differently")
		}
	}
	// A route without HTTP rules holds nothing for them.
	rs, err := Decode("route-all.yaml", []byte(kumaRouteAll))
	if err != nil {
		t.Fatal(err)
	}
	if tr := rs[0].(*TrafficRoute); tr.HTTP != nil {
		t.Errorf("route-all: http %+v", tr.HTTP)
	}
}

// The design's form (the resource's JSON: what the control-plane link carries) reads back to
// an equal route.
func TestTrafficRouteHTTPJSONRoundTrip(t *testing.T) {
	rs, err := Decode("http.yaml", []byte(kumaRouteHTTP))
	if err != nil {
		t.Fatal(err)
	}
	tr := rs[0].(*TrafficRoute)
	body, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["type"] = KindTrafficRoute
	doc, _ := json.Marshal(m)
	back, err := Decode("wire.json", doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if got := back[0].(*TrafficRoute); !reflect.DeepEqual(got.HTTP, tr.HTTP) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got.HTTP, tr.HTTP)
	}
}

// What is wrong in conf.http is named by Kuma's path (either form) with the value.
func TestKumaTrafficRouteHTTPErrors(t *testing.T) {
	rule0 := func(old, new string) string { return strings.Replace(kumaRouteHTTP, old, new, 1) }
	for _, tc := range []struct{ name, doc, want string }{
		{"path prefix without a slash", rule0("prefix: /api", "prefix: api"),
			`conf.http[0].match.path.prefix: must start with "/" (value "api")`},
		{"path exact without a slash", rule0("prefix: /api", "exact: api"),
			`conf.http[0].match.path.exact: must start with "/" (value "api")`},
		{"two matchers", rule0("prefix: /api", "prefix: /api\n        exact: /api"),
			`conf.http[0].match.path: give exactly one of prefix, exact and regex`},
		{"no matcher", rule0("        exact: GET\n", "        {}\n"),
			`conf.http[0].match.method: give exactly one of prefix, exact and regex`},
		{"a regex not compiling", rule0("regex: ^/users/[0-9]+$", "regex: ^/users/[0-9+$"),
			`conf.http[1].match.path.regex: not an RE2 regular expression: missing closing ]`},
		{"a Perl regex RE2 refuses", rule0("regex: ^/users/[0-9]+$", "regex: ^/users/(?=x)"),
			`conf.http[1].match.path.regex: not an RE2 regular expression`},
		{"a rewrite regex not compiling", rule0("pattern: ^/users/([0-9]+)$\n          substitution: /people", "pattern: ^/users/(\n          substitution: /people"),
			`conf.http[1].modify.path.regex.pattern: not an RE2 regular expression`},
		{"a header name", rule0("x-canary:", "x canary:"),
			`conf.http[0].match.headers["x canary"]: not a header name: character ' ' not allowed (value "x canary")`},
		{"an added header name", rule0("name: x-routed", "name: x-rou:ted"),
			`conf.http[0].modify.requestHeaders.add[0].name: not a header name: character ':' not allowed (value "x-rou:ted")`},
		{"the host header removed", rule0("name: x-debug", "name: Host"),
			`conf.http[0].modify.requestHeaders.remove[0].name: host and HTTP/2 pseudo-headers (":...") cannot be modified (value "Host")`},
		{"a pseudo-header added", rule0("name: x-served-by", "name: ':status'"),
			`conf.http[0].modify.responseHeaders.add[0].name: host and HTTP/2 pseudo-headers`},
		{"an added header without a value", rule0("          value: canary\n", ""),
			`conf.http[0].modify.responseHeaders.add[0].value: required`},
		{"weights adding up to 0", strings.Replace(rule0("weight: 90", "weight: 0"), "weight: 10", "weight: 0", 1),
			`conf.http[0].split: weights add up to 0`},
		{"a weight not a number", rule0("weight: 90", "weight: much"),
			`conf.http[0].split[0].weight`},
		{"a destination without a service", rule0("      kuma.io/service: users\n", "      version: v1\n"),
			`conf.http[1].destination: must contain kuma.io/service`},
		{"a wildcard other than the service", rule0("      kuma.io/service: users\n", "      kuma.io/service: users\n      version: '*'\n"),
			`conf.http[1].destination.version: "*" is only allowed as kuma.io/service`},
		{"split and destination", rule0("    destination:\n      kuma.io/service: users\n",
			"    destination:\n      kuma.io/service: users\n    split:\n    - weight: 1\n      destination: {kuma.io/service: users}\n"),
			`conf.http[1].destination: give split or destination, not both`},
		{"neither split nor destination", rule0("    destination:\n      kuma.io/service: users\n", ""),
			`conf.http[1]: needs split (weighted destinations) or destination`},
		{"no match", rule0("  - match:\n      headers:\n        x-empty:\n          exact: \"\"\n", "  - match: {}\n"),
			`conf.http[2].match: needs at least one of method, path and headers`},
		{"rewritePrefix without a prefix match", rule0("        prefix: /api", "        exact: /api"),
			`conf.http[0].modify.path.rewritePrefix: needs a path prefix match (match.path.prefix): it replaces the prefix matched (value "/v2/api")`},
		{"rewritePrefix and regex", rule0("        rewritePrefix: /v2/api\n", "        rewritePrefix: /v2/api\n        regex: {pattern: a, substitution: b}\n"),
			`conf.http[0].modify.path: give rewritePrefix or regex, not both`},
		{"host value and fromPath", rule0("        value: api.internal\n", "        value: api.internal\n        fromPath: {pattern: a, substitution: b}\n"),
			`conf.http[0].modify.host: give value or fromPath, not both`},
		{"a substitution left out", rule0("          substitution: u\\1.internal\n", ""),
			`conf.http[1].modify.host.fromPath.substitution: required`},
		{"an unknown field", rule0("    modify:\n      path:\n        rewritePrefix", "    modfy:\n      path:\n        rewritePrefix"),
			`conf.http[0].modfy: unknown field, did you mean modify?`},
		{"an unknown matcher", rule0("prefix: /api", "prefx: /api"),
			`conf.http[0].match.path.prefx: unknown field, did you mean prefix?`},
		{"the Kubernetes form", strings.Replace(kumaRouteHTTPK8s, "prefix: /api", "prefix: api", 1),
			`spec.conf.http[0].match.path.prefix: must start with "/" (value "api")`},
		{"the Kubernetes form, a destination", strings.Replace(kumaRouteHTTPK8s, "        kuma.io/service: users\n", "        version: v1\n", 1),
			`spec.conf.http[1].destination: must contain kuma.io/service`},
	} {
		_, err := Decode("route.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// The validator every agent and kuma-cp run accepts a route built in code with HTTP rules,
// and names the design's paths.
func TestValidateTrafficRouteHTTP(t *testing.T) {
	tr := &TrafficRoute{
		Meta:         Meta{Name: "r", Mesh: "default"},
		Sources:      []Selector{{Match: Tags{{Key: ServiceTag, Value: Wildcard}}}},
		Destinations: []Selector{{Match: Tags{{Key: ServiceTag, Value: "backend"}}}},
		Conf:         []WeightedDestination{{Weight: 1, Destination: Tags{{Key: ServiceTag, Value: "backend"}}}},
		HTTP: []HTTPRule{{Match: HTTPMatch{Path: &StringMatcher{Prefix: strp("/a")}},
			Destination: Tags{{Key: ServiceTag, Value: "a"}}}},
	}
	if err := Validate(tr); err != nil {
		t.Fatal(err)
	}
	tr.HTTP[0].Match.Path = &StringMatcher{Regex: strp("(")}
	if err := Validate(tr); err == nil || !strings.Contains(err.Error(), "http[0].match.path.regex: not an RE2 regular expression") {
		t.Errorf("got %v", err)
	}
}

// Envoy refuses a header to add whose name or value is over 16 KiB, and more than 1000
// headers to add on a route (its validation rules): one such rule refused every update of
// the agent's resources, so the rule is refused when the route is read.
func TestKumaTrafficRouteHTTPHeaderLimits(t *testing.T) {
	rule0 := func(old, new string) string { return strings.Replace(kumaRouteHTTP, old, new, 1) }
	big := strings.Repeat("v", 16385)
	many := strings.Repeat("        - {name: x-a, value: b}\n", 1000)
	for _, tc := range []struct{ name, doc, want string }{
		{"a value over 16 KiB", rule0("value: canary", "value: "+big),
			`conf.http[0].modify.responseHeaders.add[0].value: at most 16384 bytes (Envoy's limit), not 16385`},
		{"a name over 16 KiB", rule0("name: x-routed", "name: x"+big),
			`conf.http[0].modify.requestHeaders.add[0].name: at most 16384 bytes (Envoy's limit), not 16386`},
		{"more than 1000 headers to add", rule0("        add:\n", "        add:\n"+many),
			`conf.http[0].modify.requestHeaders.add: at most 1000 headers (Envoy's limit), not 1001`},
	} {
		_, err := Decode("route.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %.300v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// At the limits, the route is read.
	if _, err := Decode("route.yaml", []byte(rule0("value: canary", "value: "+big[1:]))); err != nil {
		t.Errorf("a value of 16384 bytes: %.300v", err)
	}
}

// Envoy refuses a regex whose RE2 program is over re2.max_program_size.error_level (100 by
// default), and with it the outbound's listener; such a regex is refused when the route is
// read, wherever it is (matches, rewrites). RE2's sizes are given beside each.
func TestKumaTrafficRouteHTTPRegexProgramSize(t *testing.T) {
	rule0 := func(old, new string) string { return strings.Replace(kumaRouteHTTP, old, new, 1) }
	for _, tc := range []struct{ name, doc, want string }{
		{"a path regex", rule0("regex: ^/users/[0-9]+$", `regex: '^(\p{L}{1,40}/){1,10}$'`),
			`conf.http[1].match.path.regex: over kuma-dp's limit of 32768 RE2 instructions`},
		{"a rewrite pattern", rule0("pattern: ^/users/([0-9]+)$", `pattern: '^/files/((\p{L}{1,40}/){1,10})$'`),
			`conf.http[1].modify.path.regex.pattern: over kuma-dp's limit`},
	} {
		_, err := Decode("route.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Under the limit, as the agent's Envoy takes them (its bootstrap lifts Envoy's default of
	// 100 instructions, which refused the first three: RE2 259, 1198 and 544).
	for _, re := range []string{"^/users/[a-z0-9-]{1,64}$", `^/users/\p{L}+$`, "^/files/(.{0,60})$",
		"^/api/v[0-9]+/(users|accounts|orders)/[a-zA-Z0-9_-]+$", "[0-9a-f]{32}"} {
		if _, err := Decode("route.yaml", []byte(rule0("regex: ^/users/[0-9]+$", "regex: '"+re+"'"))); err != nil {
			t.Errorf("%s: %v", re, err)
		}
	}
}

// The estimate of RE2's program size, against RE2's own (ProgramSize of RE2 2022-06-01):
// close for ASCII, a byte automaton for other classes, never far over RE2's.
func TestRE2ProgramSizeEstimate(t *testing.T) {
	for _, tc := range []struct {
		re  string
		re2 int
	}{
		{"a", 5}, {"GET|HEAD", 11}, {".", 12}, {"[^/]+", 13}, {"[a-z]{1,32}", 67}, {"[0-9a-f]{32}", 68},
		{`\d{3}-\d{4}`, 12}, {"é", 6}, {"[^a-zé]", 22}, {`\p{Greek}`, 66}, {`\p{Cyrillic}+`, 38},
		{`[\x{370}\x{372}\x{374}\x{376}\x{378}]`, 10}, {`[\x{10000}-\x{1000B}\x{1000D}-\x{10026}]`, 9},
		{"^/users[A-Za-z0-9_-]+[A-Za-z0-9_-]{0,20}[A-Za-z0-9_-]{2}/+[a-z]*", 22},
		{`^/users/[a-z0-9-]{1,64}$`, 259}, {`^/files/.{0,60}$`, 544},
	} {
		n, err := re2ProgramSize(tc.re)
		if err != nil {
			t.Fatal(err)
		}
		if n > tc.re2+5 || (tc.re2 > maxRE2ProgramSize) != (n > maxRE2ProgramSize) || n < tc.re2/2 {
			t.Errorf("%s: estimated %d, RE2's %d", tc.re, n, tc.re2)
		}
	}
}

// Envoy rewrites with RE2, whose substitution takes \0 to \9 (the pattern's groups) and \\:
// a substitution naming a group the pattern lacks, or another escape, makes RE2 refuse the
// rewrite on every request (the path or host left as it was), so it is refused when read.
func TestKumaTrafficRouteHTTPSubstitution(t *testing.T) {
	rule0 := func(old, new string) string { return strings.Replace(kumaRouteHTTP, old, new, 1) }
	for _, tc := range []struct{ name, doc, want string }{
		{"a group the pattern lacks", rule0(`substitution: u\1.internal`, `substitution: u\2.internal`),
			`conf.http[1].modify.host.fromPath.substitution: \2 names a group the pattern has not (it has 1) (value "u\\2.internal")`},
		{"an escape RE2 does not know", rule0(`substitution: u\1.internal`, `substitution: u\1\.internal`),
			`conf.http[1].modify.host.fromPath.substitution: "\" is followed by a digit (a group) or "\" (value`},
		{"a trailing backslash", rule0(`substitution: u\1.internal`, `substitution: u\1\`),
			`conf.http[1].modify.host.fromPath.substitution: "\" is followed by a digit (a group) or "\" (value`},
	} {
		_, err := Decode("route.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	for _, sub := range []string{`u\0`, `\\u\1`, `x`} {
		if _, err := Decode("route.yaml", []byte(rule0(`substitution: u\1.internal`, "substitution: '"+sub+"'"))); err != nil {
			t.Errorf("%s: %v", sub, err)
		}
	}
}
