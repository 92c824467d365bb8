package shardzones

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Each zone of a mesh becomes one DNSZone for that mesh's agents, which the agent's side of
// the link decodes and parses back to a zone with the same serial as the control plane's.
func TestDocsDecodeOnTheAgentSide(t *testing.T) {
	items := []store.Item{item("Router", "shard1", 3, router), item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw"))}
	in := Input(items, nil)
	in.DefaultNSAddr = netip.MustParseAddr("192.0.2.53")
	cat, problems := authdns.Build(in, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	docs, errs := Docs(MeshCatalogs(in, cat))
	if len(errs) > 0 || len(docs) != 1 {
		t.Fatalf("docs %v, errors %v", docs, errs)
	}
	d := docs[0]
	if d.Kind != mesh.KindDNSZone || d.Name != "shard1.apps.test" || d.Meshless || d.Mesh != "default" {
		t.Fatalf("doc %+v", d)
	}
	r, err := cplink.DecodeResource(d.Kind, d.Name, d.Body)
	if err != nil {
		t.Fatalf("%v\n%s", err, d.Body)
	}
	dz := r.(*mesh.DNSZone)
	if dz.Partial {
		t.Error("a router's zone sent as partial")
	}
	z, err := authdns.ParseZone(dz.Origin, strings.NewReader(dz.Zone))
	if err != nil {
		t.Fatal(err)
	}
	if z.Serial() != cat.Zone("shard1.apps.test").Serial() || z.Serial() != 4 {
		t.Fatalf("serial %d, want %d", z.Serial(), cat.Zone("shard1.apps.test").Serial())
	}
}

// Each mesh's agents get their own mesh's zones only: its routers' zones, and a users' zone
// (marked partial) holding its own names - never another mesh's router zone or user names
// (issue 27 item 3: a route of mesh other rewrote names for mesh default's agents).
func TestMeshCatalogsKeepMeshesApart(t *testing.T) {
	inMesh := func(m string, it store.Item) store.Item {
		it.Mesh = m
		it.Doc = []byte(strings.ReplaceAll(string(it.Doc), "mesh: default", "mesh: "+m))
		return it
	}
	evil := strings.ReplaceAll(strings.ReplaceAll(router, "shard1", "evil"), "kuma.io/service: gw", "kuma.io/service: egw")
	userRoute := func(name, host, router string) string {
		return strings.ReplaceAll(route(name, host, "None", "True"), "shard1", router)
	}
	items := []store.Item{
		item("Router", "shard1", 3, router), item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw")),
		item("Route", "www", 5, userRoute("www", "www.acme.test", "shard1")),
		inMesh("other", item("Router", "evil", 6, evil)), inMesh("other", item("Dataplane", "egw-1", 7, dp("egw-1", "10.6.6.6", "egw"))),
		inMesh("other", item("Route", "api", 8, userRoute("api", "api.acme.test", "evil"))),
	}
	in := Input(items, nil)
	in.UserZones = []string{"acme.test"}
	all, _ := authdns.Build(in, nil)
	docs, errs := Docs(MeshCatalogs(in, all))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := map[string]string{}
	for _, d := range docs {
		r, err := cplink.DecodeResource(d.Kind, d.Name, d.Body)
		if err != nil {
			t.Fatal(err)
		}
		dz := r.(*mesh.DNSZone)
		got[d.Mesh+" "+d.Name] = fmt.Sprint(dz.Partial)
		z, err := authdns.ParseZone(dz.Origin, strings.NewReader(dz.Zone))
		if err != nil {
			t.Fatal(err)
		}
		if z.Serial() != all.Zone(dz.Origin).Serial() {
			t.Errorf("%s %s: serial %d, the control plane's DNS has %d", d.Mesh, d.Name, z.Serial(), all.Zone(dz.Origin).Serial())
		}
		if d.Name == "acme.test" && d.Mesh == "default" && (strings.Contains(dz.Zone, "api.acme.test") || !strings.Contains(dz.Zone, "www.acme.test")) {
			t.Errorf("mesh default's users' zone:\n%s", dz.Zone)
		}
		if d.Name == "acme.test" && d.Mesh == "other" && (strings.Contains(dz.Zone, "www.acme.test") || !strings.Contains(dz.Zone, "api.acme.test")) {
			t.Errorf("mesh other's users' zone:\n%s", dz.Zone)
		}
	}
	want := map[string]string{"default shard1.apps.test": "false", "default acme.test": "true", "other evil.apps.test": "false", "other acme.test": "true"}
	if !maps.Equal(got, want) {
		t.Errorf("docs %v, want %v", got, want)
	}
}

// One mesh: its agents' catalog is the one the control plane's DNS serves, not built again.
func TestMeshCatalogsOneMesh(t *testing.T) {
	in := Input([]store.Item{item("Router", "shard1", 3, router), item("Route", "www", 5, route("www", "www.acme.test", "None", "True"))}, nil)
	in.UserZones = []string{"acme.test"}
	all, _ := authdns.Build(in, nil)
	if got := MeshCatalogs(in, all); len(got) != 1 || got["default"] != all {
		t.Errorf("one mesh: %v, want the served catalog itself", got)
	}
}
