package fanout

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// BenchmarkFeedServe: the feed's work for one changed resource in a store of N Dataplanes,
// with one table (the agents' mesh) in use: the served set rebuilt from the decoded cache and
// compared with the table (the agents' side is not in it).
//
//	go test ./cp/fanout -run '^$' -bench FeedServe
func BenchmarkFeedServe(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cp := New(nil, slog.New(slog.DiscardHandler))
			f := NewFeed(nil, cp, slog.New(slog.DiscardHandler))
			f.items = map[cpstore.Key]cpstore.Item{}
			for i := range n {
				k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: fmt.Sprintf("dp-%d", i)}
				f.items[k] = cpstore.Item{Key: k, Doc: dataplaneDoc(k.Name, "v0"), Version: int64(i + 1), Created: time.Unix(1, 0)}
			}
			f.serve()
			cp.tableFor("default", mesh.KindDataplane)
			b.ResetTimer()
			for i := range b.N {
				k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "dp-0"}
				f.apply(cpstore.Event{Type: cpstore.Put, Revision: int64(n + i + 1),
					Item: cpstore.Item{Key: k, Doc: dataplaneDoc("dp-0", fmt.Sprintf("v%d", i+1)), Version: int64(n + i + 1)}})
				f.serve()
			}
		})
	}
}
