package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// A list of the whole store is decoded at once (a replica's start): its documents and the
// garbage of decoding them are several times what the feed keeps. Once it is served, the
// memory the heap holds from the system is back near what is live, not at the list's peak
// (the runtime returned it over minutes: a replica's resident memory after its start was
// the peak's, 2.5 KB per stored dataplane at 100,000 where about 550 B is live).
func TestFeedReturnsTheListsMemory(t *testing.T) {
	const n = 20000
	items := make([]cpstore.Item, n)
	for i := range n {
		k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: fmt.Sprintf("dp-%d", i)}
		items[i] = cpstore.Item{Key: k, Doc: dataplaneDoc(k.Name, "v1"), Version: int64(i + 1)}
	}
	st := &listStore{items: items}
	feed := NewFeed(st, New(nil, slog.New(slog.DiscardHandler)), slog.New(slog.DiscardHandler))
	if _, err := feed.relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	var served runtime.MemStats
	runtime.ReadMemStats(&served)
	held := served.HeapSys - served.HeapReleased // what the heap holds from the system
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	t.Logf("held from the system once served: %d MiB; live: %d MiB", held>>20, live.HeapAlloc>>20)
	if held > 2*live.HeapAlloc+(8<<20) {
		t.Errorf("once the list is served the heap holds %d MiB from the system, %d MiB of it live: the list's garbage is not returned", held>>20, live.HeapAlloc>>20)
	}
	runtime.KeepAlive(st)
}
