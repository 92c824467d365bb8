package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// A list of the whole store is decoded at once (a replica's start): its documents and the
// garbage of decoding them are several times what the feed keeps. Within seconds of its
// being served (store.ListDone: a second after the last follower's list), the memory the heap
// holds from the system is back near what is live, not at the list's peak (the runtime
// returned it over minutes: a replica's resident memory after its start was the peak's,
// 2.5 KB per stored dataplane at 100,000 where about 550 B is live).
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
	heldNow := func() uint64 { // what the heap holds from the system
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapSys - m.HeapReleased
	}
	peak := heldNow()
	deadline := time.Now().Add(5 * time.Second)
	for heldNow() > peak/2 {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the list was served the heap still holds %d MiB from the system (%d MiB when served): the list's garbage is not returned", heldNow()>>20, peak>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	held := heldNow()
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	t.Logf("held from the system: %d MiB when served, %d MiB once returned; live: %d MiB", peak>>20, held>>20, live.HeapAlloc>>20)
	if held > 2*live.HeapAlloc+(8<<20) {
		t.Errorf("the heap holds %d MiB from the system for %d MiB live", held>>20, live.HeapAlloc>>20)
	}
	runtime.KeepAlive(st)
}
