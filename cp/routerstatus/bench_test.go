package routerstatus

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// putStore takes every Put (what the writer writes), for a benchmark without etcd.
type putStore struct{ store.Store }

func (putStore) Put(_ context.Context, k store.Key, doc []byte, expect int64) (store.Item, error) {
	return store.Item{Key: k, Doc: doc, Version: expect + 1}, nil
}

// BenchmarkPass: the leader's pass every DefaultPoll over 1,000 routers of 3 replicas each
// when no readiness changed (the common case): what the readiness poll costs.
//
//	go test ./cp/routerstatus -run '^$' -bench Pass -benchmem
func BenchmarkPass(b *testing.B) {
	const routers, replicas = 1000, 3
	wd := &watched{routers: map[store.Key]*router{}, dps: map[store.Key]*mesh.Dataplane{}}
	w := &Writer{Store: putStore{}, Log: slog.New(slog.DiscardHandler), Online: func(_, name string) bool { return name[len(name)-1] != '0' }}
	for i := range routers {
		doc := fmt.Sprintf("type: Router\nname: r%d\ndns: r%d.apps.test\ndataplanes: {kuma.io/service: gw-%d}\n", i, i, i)
		w.take(wd, store.Item{Key: store.Key{Mesh: "default", Type: mesh.KindRouter, Name: fmt.Sprintf("r%d", i)}, Doc: []byte(doc), Version: 1})
		for j := range replicas {
			name := fmt.Sprintf("gw-%d-%d", i, j)
			doc := fmt.Sprintf("type: Dataplane\nname: %s\nnetworking: {address: 10.%d.%d.%d, inbound: [{port: 8080, tags: {kuma.io/service: gw-%d}}]}\n", name, i/250, i%250, j+1, i)
			w.take(wd, store.Item{Key: store.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}, Doc: []byte(doc), Version: 1})
		}
	}
	m := w.members(wd)
	w.pass(context.Background(), wd, m) // every status written once
	b.ResetTimer()
	for range b.N {
		w.pass(context.Background(), wd, m)
	}
}

// BenchmarkListMeshWithoutRouters: what a list of 10,000 Dataplanes of a mesh without a
// Router costs the leader's writer (at its start, and at every re-list): none of them can be
// a replica.
//
//	go test ./cp/routerstatus -run '^$' -bench ListMeshWithoutRouters -benchmem
func BenchmarkListMeshWithoutRouters(b *testing.B) {
	const dps = 10000
	items := make([]store.Item, 0, dps)
	for i := range dps {
		name := fmt.Sprintf("web-%d", i)
		doc := fmt.Sprintf("type: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: 10.1.%d.%d\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web-%d\n", name, i/250, i%250, i)
		items = append(items, store.Item{Key: store.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}, Doc: []byte(doc), Version: 1})
	}
	w := &Writer{Store: putStore{}, Log: slog.New(slog.DiscardHandler)}
	for b.Loop() {
		wd := &watched{routers: map[store.Key]*router{}, dps: map[store.Key]*mesh.Dataplane{}}
		for _, it := range items {
			w.take(wd, it)
		}
	}
}
