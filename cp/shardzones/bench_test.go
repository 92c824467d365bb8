package shardzones

import (
	"fmt"
	"testing"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
)

// BenchmarkMeshCatalogs: what each build adds for the agents - every mesh's own zones - next
// to the catalog the control plane's DNS serves (Build, measured alone for comparison): 10
// routers over 2 meshes, 3 replicas each, 10,000 user names in one users' zone.
//
//	go test -run '^$' -bench . -benchmem ./cp/shardzones
func BenchmarkMeshCatalogs(b *testing.B) {
	in := twoMeshes(10000)
	all, _ := authdns.Build(in, nil)
	for b.Loop() {
		MeshCatalogs(in, all)
	}
}

func BenchmarkBuildAll(b *testing.B) {
	in := twoMeshes(10000)
	serials := authdns.NewSerials()
	for b.Loop() {
		authdns.Build(in, serials)
	}
}

func twoMeshes(users int) authdns.Input {
	in := authdns.SyntheticInput(10, 3, users)
	for i := range in.Routers {
		in.Routers[i].Mesh = fmt.Sprint("m", i%2)
	}
	for i := range in.Users {
		in.Users[i].Mesh = fmt.Sprint("m", i%10%2) // router shard<i%10>'s mesh
	}
	return in
}

// BenchmarkInputPerChange: what one stored change costs the zones' input with 10,000
// Dataplanes stored, one Router selecting 3 of them. every-document is Input over every
// stored item, what Run did at each build before (it kept the documents and decoded them
// all); one-change is what it does now: the changed resource decoded (view.take) and the
// input built from what the view keeps.
//
//	go test -run '^$' -bench InputPerChange -benchmem ./cp/shardzones
func BenchmarkInputPerChange(b *testing.B) {
	items := []store.Item{item("Router", "shard1", 1, router)}
	for i := range 10000 {
		svc := "web"
		if i%1000 == 0 {
			svc = "gw"
		}
		name := fmt.Sprint("dp-", i)
		items = append(items, item("Dataplane", name, int64(i+2), dp(name, fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), svc)))
	}
	changed := items[len(items)/2]
	b.Run("every-document", func(b *testing.B) {
		for b.Loop() {
			Input(items, nil)
		}
	})
	b.Run("one-change", func(b *testing.B) {
		v := newView(nil)
		v.load(items)
		for b.Loop() {
			v.take(changed)
			v.input(nil)
		}
	})
}
