package shardzones

import (
	"fmt"
	"testing"

	"github.com/kumadp/kuma-dp/authdns"
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
