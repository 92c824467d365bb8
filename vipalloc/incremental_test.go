package vipalloc

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// TestIncrementalMatchesFresh applies random changes to one allocator and checks, after each,
// that its table has the same entries as a fresh allocator's on the same snapshot, that no
// surviving hostname moved, that no two hostnames share a VIP, and that the indexes agree
// (with a tiny delta limit, so both derived and compacted tables are exercised).
func TestIncrementalMatchesFresh(t *testing.T) {
	defer func(v int) { deltaMin = v }(deltaMin)
	deltaMin = 8
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { incrementalRun(t, seed) })
	}
}

func incrementalRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	dps := map[string]*mesh.Dataplane{}
	vos := map[string]*mesh.VirtualOutbound{}
	var extra []mesh.Resource
	allVOs := append(designVOs(),
		vo("clash", "{{service}}.mesh", "8080", map[string]string{mesh.ServiceTag: "service"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "v2"})),
		vo("fixed", "shared.mesh", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "s3"})))
	newDP := func(i int) *mesh.Dataplane {
		return dp(fmt.Sprintf("dp-%03d", i), svc(fmt.Sprintf("s%d", rng.IntN(8)), fmt.Sprintf("v%d", rng.IntN(3)),
			[]string{"", "zone-1", "zone-2"}[rng.IntN(3)]))
	}
	a := newAlloc(t, nil)
	prev := map[string][2]string{}
	for step := 0; step < 150; step++ {
		switch op := rng.IntN(10); {
		case op < 5: // add or replace a dataplane
			i := rng.IntN(60)
			dps[fmt.Sprintf("dp-%03d", i)] = newDP(i)
		case op < 7: // remove one
			for k := range dps {
				delete(dps, k)
				break
			}
		case op < 9: // toggle a policy
			v := allVOs[rng.IntN(len(allVOs))]
			if _, ok := vos[v.Name]; ok {
				delete(vos, v.Name)
			} else {
				vos[v.Name] = v
			}
		default: // toggle the MeshExternalServices
			if extra == nil {
				extra = []mesh.Resource{hg("gen", "{{ name }}.ext.local", nil), hg("clash-gen", "s1.mesh", nil),
					mes("m1", 80, nil), mes("m2", 8080, map[string]string{"team": "x"})}
			} else {
				extra = nil
			}
		}
		if len(dps) == 0 {
			dps["dp-000"] = newDP(0)
		}
		var dl []*mesh.Dataplane
		for _, d := range dps {
			dl = append(dl, d)
		}
		var vl []*mesh.VirtualOutbound
		for _, v := range vos {
			vl = append(vl, v)
		}
		s := snap(dl, vl, extra...)
		got := allocate(t, a, s)
		fresh := allocate(t, newAlloc(t, nil), s)
		if !reflect.DeepEqual(shape(got), shape(fresh)) {
			t.Fatalf("step %d: incremental and fresh differ:\n%v\n%v", step, shape(got), shape(fresh))
		}
		now := map[string][2]string{}
		for h, v := range vipsOf(got) {
			e, _ := got.Lookup(h)
			now[h] = [2]string{v, e.MeshExternalService()} // a VIP stays with its owner
		}
		seen := map[string]string{}
		for h, vo := range now {
			v := vo[0]
			if p, ok := prev[h]; ok && p[1] == vo[1] && p[0] != v {
				t.Fatalf("step %d: %s moved %s -> %s", step, h, p[0], v)
			}
			if other, dup := seen[v]; dup && !sameMES(got, h, other) {
				t.Fatalf("step %d: %s and %s share %s", step, h, other, v)
			}
			seen[v] = h
		}
		prev = now
	}
}

func sameMES(tb *Table, a, b string) bool {
	ea, _ := tb.Lookup(a)
	eb, _ := tb.Lookup(b)
	return ea.MeshExternalService() != "" && ea.MeshExternalService() == eb.MeshExternalService()
}

// shape is a table without its VIPs (which legitimately depend on history).
func shape(tb *Table) []string {
	var out []string
	for _, e := range tb.Entries() {
		out = append(out, fmt.Sprintf("%s %v %s %s %v %s", e.Hostname(), e.Ports(), e.Key(), e.Status, e.Targets(), e.MeshExternalService()))
	}
	for _, s := range tb.Skipped() {
		out = append(out, "skip "+s.Key+" "+s.Reason)
	}
	for n, st := range tb.MeshExternalServiceStatuses() {
		out = append(out, fmt.Sprintf("mes %s %d %v", n, len(st.Addresses), st.VIP.Value != ""))
	}
	sort.Strings(out)
	return out
}

// TestLargeMeshParallelPaths runs a mesh big enough for the concurrent paths (expansion,
// settling, sorting, index building) and checks they are deterministic and consistent.
func TestLargeMeshParallelPaths(t *testing.T) {
	dps := bigMesh(1500) // 9,000 dataplanes, ~9,000 hostnames
	s := snap(dps, designVOs())
	a1, a2 := newAlloc(t, nil), newAlloc(t, nil)
	t1, t2 := allocate(t, a1, s), allocate(t, a2, s)
	if t1.Len() != 9000 || !reflect.DeepEqual(vipsOf(t1), vipsOf(t2)) || !reflect.DeepEqual(shape(t1), shape(t2)) {
		t.Fatalf("two full allocations differ (Len %d, %d)", t1.Len(), t2.Len())
	}
	// Then a small change on top: derived table, nothing moved.
	more := append(append([]*mesh.Dataplane(nil), dps...), dp("zz-extra", svc("zz-extra", "v1", "zone-1")))
	t3 := allocate(t, a1, snap(more, designVOs()))
	if t3.delta == nil {
		t.Error("a one-dataplane change rebuilt the whole index")
	}
	after := vipsOf(t3)
	for h, v := range vipsOf(t1) {
		if got := after[h]; got != v {
			t.Fatalf("%s moved %s -> %s", h, v, got)
		}
	}
	if t3.Len() != 9003 {
		t.Errorf("Len = %d, want 9003", t3.Len())
	}
}

// TestIncrementalDefaultNames does the same for default names, which are found through
// their hostname states rather than a map of their own: services that differ in case only
// (one hostname, two candidates), invalid names (skips), a non-ASCII service whose lower case
// is an ASCII hostname, a dataplane replaced by another of the same service in one round, and
// a change of mesh (every default name dropped and made again).
func TestIncrementalDefaultNames(t *testing.T) {
	services := []string{"web", "Web", "WEB", "api", "bad name", "\u212aube", "kube", "Ω"}
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		dps := map[string]*mesh.Dataplane{}
		a := newAlloc(t, nil)
		meshName := "default"
		for step := 0; step < 120; step++ {
			switch op := rng.IntN(12); {
			case op < 6:
				i := rng.IntN(20)
				name := fmt.Sprintf("dp-%03d", i)
				dps[name] = dp(name, svc(services[rng.IntN(len(services))], "", ""))
			case op < 10:
				for k := range dps {
					delete(dps, k)
					break
				}
			case op < 11: // two dataplanes of one service swap places in one round
				s := services[rng.IntN(len(services))]
				delete(dps, "dp-100")
				dps["dp-101"] = dp("dp-101", svc(s, "", ""))
			default:
				meshName = map[string]string{"default": "other", "other": "default"}[meshName]
			}
			if len(dps) == 0 {
				dps["dp-000"] = dp("dp-000", svc("api", "", ""))
			}
			var dl []*mesh.Dataplane
			for _, d := range dps {
				dl = append(dl, d)
			}
			s := snap(dl, nil)
			s.Mesh = meshName
			got := allocate(t, a, s)
			fresh := allocate(t, newAlloc(t, nil), s)
			if !reflect.DeepEqual(shape(got), shape(fresh)) {
				t.Fatalf("seed %d step %d: incremental and fresh differ:\n%v\n%v", seed, step, shape(got), shape(fresh))
			}
		}
	}
}
