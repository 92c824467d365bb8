package authdns

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// A catalog written out zone by zone and read back answers every query exactly as the
// original: what the agents' resolvers serve is what the control plane's DNS serves.
func TestParseZoneAnswersAsTheOriginal(t *testing.T) {
	orig, problems := Build(fixture(), nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	var zones []*Zone
	for _, z := range orig.Zones() {
		var b bytes.Buffer
		if err := WriteZone(&b, z); err != nil {
			t.Fatal(err)
		}
		back, err := ParseZone(strings.TrimSuffix(z.Origin, "."), &b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", z.Origin, err, b.String())
		}
		if back.Serial() != z.Serial() || back.TTL != z.TTL || back.contentHash() != z.hash {
			t.Fatalf("%s: serial %d ttl %d hash %x, want %d %d %x", z.Origin, back.Serial(), back.TTL, back.contentHash(), z.Serial(), z.TTL, z.hash)
		}
		zones = append(zones, back)
	}
	parsed := NewCatalog(zones...)
	names := []string{"web.shard1.apps.example.com", "shard1.apps.example.com", "router-shard1.shard1.apps.example.com",
		"ns1.apps.example.com", "www.acme.test", "x.acme.test", "a.b.acme.test", "b.acme.test", "c.a.b.acme.test",
		"shop.other.test", "nope.other.test", "example.org", "x.shard2.apps.example.com"}
	for _, name := range names {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeSOA, dns.TypeNS, dns.TypeTXT, dns.TypeANY} {
			a, b := ask(t, orig, name, qt), ask(t, parsed, name, qt)
			if a.Rcode != b.Rcode || a.Authoritative != b.Authoritative ||
				strings.Join(rrStrings(a.Answer), "|") != strings.Join(rrStrings(b.Answer), "|") ||
				strings.Join(rrStrings(a.Ns), "|") != strings.Join(rrStrings(b.Ns), "|") {
				t.Errorf("%s %s: parsed catalog answers\n%v\nwant\n%v", name, dns.TypeToString[qt], b, a)
			}
		}
	}
}

func TestParseZoneRefusesBadZones(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"$ORIGIN a.test.\nwww 30 IN A 10.0.0.1\n", "first record must be its SOA"},
		{"$ORIGIN a.test.\n@ 30 IN SOA ns.a.test. h.a.test. 1 300 60 1209600 30\nwww.b.test. 30 IN A 10.0.0.1\n", "outside the zone"},
		{"$ORIGIN a.test.\n@ 30 IN SOA ns.a.test. h.a.test. 1 300 60 1209600 30\nwww 30 IN A 10.0.0.999\n", "a.test"},
		{"", "no SOA"},
		{"$ORIGIN a.test.\n@ 30 IN SOA ns.a.test. h.a.test. 1 300 60 1209600 30\n$GENERATE 0-65535 h$ A 10.0.0.1\n", "line 3: $GENERATE is refused"},
		{"$ORIGIN a.test.\n@ 30 IN SOA ns.a.test. h.a.test. 1 300 60 1209600 30\n$include /etc/passwd\n", "line 3: $INCLUDE is refused"},
		{"$ORIGIN a.test.\n@ 30 IN SOA ns.a.test. h.a.test. 1 300 60 1209600 30\n" + strings.Repeat(";", MaxZoneBytes), "over 67108864 bytes"},
	} {
		_, err := ParseZone("a.test", strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.200q: error %v, want one with %q", c.text, err, c.want)
		}
	}
}

// The answer engine is shared with the agents' resolvers: this package must not pull in the
// control plane's store or any other control-plane package.
func TestNoControlPlaneDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "/kuma-dp/") && !strings.HasSuffix(dep, "/authdns") {
			t.Errorf("authdns depends on %s: the agents import it", dep)
		}
	}
}
