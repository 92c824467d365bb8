package mesh

import (
	"strings"
	"testing"
)

// A dataplane's addresses reach Envoy as endpoint and listener addresses: an IPv6 address
// with a zone (fe80::1%eth0) is no address Envoy parses, and it rejects the whole update it
// comes in, so one such dataplane in the directory would stop every change from reaching
// Envoy; 0.0.0.0 and :: are no address to connect to. Kuma refuses them too.
func TestDataplaneAddressesEnvoyCanUse(t *testing.T) {
	doc := func(addr, inbound string) string {
		return "type: Dataplane\nmesh: default\nname: d\nnetworking:\n  address: \"" + addr + "\"\n  inbound:\n  - port: 80\n" + inbound + "    tags: {kuma.io/service: s}\n"
	}
	for _, tc := range []struct{ name, doc, err string }{
		{"IPv6", doc("2001:db8::10", ""), ""},
		{"IPv4-mapped IPv6", doc("::ffff:10.0.0.7", ""), ""},
		{"inbound on every address", doc("10.0.0.1", "    address: 0.0.0.0\n"), ""},
		{"zone", doc("fe80::1%eth0", ""),
			`f.yaml#1: dataplane "d": networking.address: an IP address without a zone (%eth0) (value "fe80::1%eth0")`},
		{"inbound zone", doc("fe80::1", "    address: \"fe80::2%lo\"\n"),
			`f.yaml#1: dataplane "d": networking.inbound[0].address: an IP address without a zone (%lo) (value "fe80::2%lo")`},
		{"unspecified IPv6", doc("::", ""),
			`f.yaml#1: dataplane "d": networking.address: must not be 0.0.0.0 or :: (other dataplanes connect to it) (value "::")`},
		{"unspecified IPv4", doc("0.0.0.0", ""),
			`f.yaml#1: dataplane "d": networking.address: must not be 0.0.0.0 or :: (other dataplanes connect to it) (value "0.0.0.0")`},
		{"brackets", doc("[2001:db8::10]", ""),
			`f.yaml#1: dataplane "d": networking.address: not an IP address (value "[2001:db8::10]")`},
	} {
		_, err := Decode("f.yaml", []byte(tc.doc))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("%s: error\n got %q\nwant %q", tc.name, got, tc.err)
		}
	}
	mes := "type: MeshExternalService\nname: m\nmesh: default\nspec:\n  match: {port: 80, protocol: tcp}\n  endpoints:\n  - {address: \"fe80::1%eth0\", port: 80}\n"
	want := `f.yaml#1: meshexternalservice "m": spec.endpoints[0].address: an IP address without a zone (%eth0) (value "fe80::1%eth0")`
	if _, err := Decode("f.yaml", []byte(mes)); err == nil || err.Error() != want {
		t.Errorf("MeshExternalService endpoint with a zone: error\n got %v\nwant %s", err, want)
	}
}

// A tuple's key spells its tags as policy{k1=v1,k2=v2}: a tag holding ',', '=', '{' or '}'
// could make two tuples spell one key, and the second inbound was then counted into the
// first's name ({s: "x,v=y", v: z} and {s: x, v: "y,v=z"} both p{s=x,v=y,v=z}). Kuma's tag
// rules refuse those characters too.
func TestTagsCannotSpellAnotherTuple(t *testing.T) {
	dp := func(tags string) string {
		return "type: Dataplane\nmesh: default\nname: d\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: " + tags + "\n"
	}
	for _, tc := range []struct{ tags, err string }{
		{`{kuma.io/service: "x,version=y", version: z}`, `networking.inbound[0].tags["kuma.io/service"]: tag values cannot contain ',', '=', '{' or '}' (value "x,version=y")`},
		{`{kuma.io/service: x, version: "y}"}`, `networking.inbound[0].tags.version: tag values cannot contain ',', '=', '{' or '}' (value "y}")`},
		{`{kuma.io/service: x, "a=b": c}`, `networking.inbound[0].tags["a=b"]: tag keys cannot contain ',', '=', '{' or '}' (value "c")`},
		{`{kuma.io/service: x, version: "v1.2:3_4-5"}`, ``},
	} {
		_, err := Decode("f.yaml", []byte(dp(tc.tags)))
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), `f.yaml#1: dataplane "d": `)
		}
		if got != tc.err {
			t.Errorf("%s: error\n got %q\nwant %q", tc.tags, got, tc.err)
		}
	}
}
