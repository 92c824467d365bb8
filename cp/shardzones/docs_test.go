package shardzones

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Each zone becomes one DNSZone for every mesh, which the agent's side of the link decodes
// and parses back to a zone with the same serial.
func TestDocsDecodeOnTheAgentSide(t *testing.T) {
	items := []store.Item{item("Router", "shard1", 3, router), item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw"))}
	in := Input(items, nil, nil)
	in.DefaultNSAddr = netip.MustParseAddr("192.0.2.53")
	cat, problems := authdns.Build(in, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	docs, errs := Docs(cat)
	if len(errs) > 0 || len(docs) != 1 {
		t.Fatalf("docs %v, errors %v", docs, errs)
	}
	d := docs[0]
	if d.Kind != mesh.KindDNSZone || d.Name != "shard1.apps.test" || !d.Meshless {
		t.Fatalf("doc %+v", d)
	}
	r, err := cplink.DecodeResource(d.Kind, d.Name, d.Body)
	if err != nil {
		t.Fatalf("%v\n%s", err, d.Body)
	}
	dz := r.(*mesh.DNSZone)
	if !mesh.Meshless(dz) {
		t.Fatal("a DNSZone must apply to every mesh")
	}
	z, err := authdns.ParseZone(dz.Origin, strings.NewReader(dz.Zone))
	if err != nil {
		t.Fatal(err)
	}
	if z.Serial() != cat.Zone("shard1.apps.test").Serial() || z.Serial() != 4 {
		t.Fatalf("serial %d, want %d", z.Serial(), cat.Zone("shard1.apps.test").Serial())
	}
}
