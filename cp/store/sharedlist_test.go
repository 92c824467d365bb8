package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// gatedStore counts the lists that reach the store and holds each until gate is closed.
type gatedStore struct {
	Store
	lists atomic.Int32
	gate  chan struct{}
}

func (g *gatedStore) List(ctx context.Context, mesh, typ, after string, limit int) ([]Item, string, int64, error) {
	g.lists.Add(1)
	<-g.gate
	return g.Store.List(ctx, mesh, typ, after, limit)
}

type listed struct {
	items []Item
	rev   int64
	err   error
}

func listIn(ctx context.Context, s Store) chan listed {
	out := make(chan listed, 1)
	go func() {
		items, _, rev, err := s.List(ctx, "", "", "", 0)
		out <- listed{items, rev, err}
	}()
	return out
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Two followers listing the whole store at once read it once and get the same list; a list
// asked after it ended reads the store again (never an old answer); a paged or filtered list
// is never shared.
func TestSharedListsReadTheStoreOnceForOverlappingCallers(t *testing.T) {
	ctx := context.Background()
	g := gatedDataplanes(t, 3)
	s := SharedLists(g).(*sharedLists)

	first := listIn(ctx, s)
	waitUntil(t, "the first list reaches the store", func() bool { return g.lists.Load() == 1 })
	second := listIn(ctx, s)
	waitUntil(t, "the second caller joins the first's list", func() bool { return s.joined() == 1 })
	close(g.gate)
	a, b := <-first, <-second
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	if len(a.items) != 3 || len(b.items) != 3 || a.rev != b.rev || &a.items[0] != &b.items[0] {
		t.Fatalf("lists of %d and %d items at revisions %d and %d, want one list of 3 shared", len(a.items), len(b.items), a.rev, b.rev)
	}
	if n := g.lists.Load(); n != 1 {
		t.Fatalf("the store was listed %d times for two overlapping callers, want once", n)
	}

	if _, err := g.Store.Put(ctx, Key{"default", "Dataplane", "dp-new"}, []byte("doc"), Any); err != nil {
		t.Fatal(err)
	}
	later := <-listIn(ctx, s)
	if later.err != nil || len(later.items) != 4 || g.lists.Load() != 2 {
		t.Fatalf("a list after the shared one: %d items (err %v), the store listed %d times; want 4 items read again", len(later.items), later.err, g.lists.Load())
	}
	if items, _, _, err := s.List(ctx, "", "Dataplane", "", 1); err != nil || len(items) != 1 || g.lists.Load() != 3 {
		t.Fatalf("a page of one: %d items (err %v), store listed %d times; want it passed to the store", len(items), err, g.lists.Load())
	}
}

// The caller whose list is shared stops waiting (its context ends): a caller that joined it
// reads the store itself instead of getting the other's cancellation.
func TestSharedListsJoinerOutlivesTheFirstCaller(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := context.Background()
	base := NewEtcd(c.Client(), "/kuma")
	if _, err := base.Put(ctx, Key{"default", "Dataplane", "dp-0"}, []byte("doc"), Any); err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: base, gate: make(chan struct{})}
	s := SharedLists(g).(*sharedLists)
	firstCtx, cancel := context.WithCancel(ctx)
	first := listIn(firstCtx, s)
	waitUntil(t, "the first list reaches the store", func() bool { return g.lists.Load() == 1 })
	second := listIn(ctx, s)
	waitUntil(t, "the second caller joins", func() bool { return s.joined() == 1 })
	cancel()
	close(g.gate)
	if a := <-first; a.err == nil {
		t.Fatalf("the cancelled caller's list succeeded (%d items): the test did not cancel it", len(a.items))
	}
	if b := <-second; b.err != nil || len(b.items) != 1 {
		t.Fatalf("the joined caller got %d items, error %v; want its own list of 1", len(b.items), b.err)
	}
}

// The wrapper keeps what the store tells beyond Store: its newest delete (the feed's content
// revision reads it through the wrapper).
func TestSharedListsTellTheNewestDelete(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := context.Background()
	base := NewEtcd(c.Client(), "/kuma")
	k := Key{"default", "Dataplane", "dp-0"}
	if _, err := base.Put(ctx, k, []byte("doc"), Any); err != nil {
		t.Fatal(err)
	}
	if err := base.Delete(ctx, k, Any); err != nil {
		t.Fatal(err)
	}
	want, err := base.LastDelete(ctx, 0)
	if err != nil || want == 0 {
		t.Fatalf("the store's newest delete: %d, %v", want, err)
	}
	ld, ok := SharedLists(base).(interface {
		LastDelete(ctx context.Context, rev int64) (int64, error)
	})
	if !ok {
		t.Fatal("SharedLists hides the store's LastDelete")
	}
	if got, err := ld.LastDelete(ctx, 0); got != want || err != nil {
		t.Fatalf("LastDelete through the wrapper: %d, %v; want %d", got, err, want)
	}
}

// What the callers of one shared list compute of an item (Shared) is computed once, by the
// first to ask, and dropped once each caller has taken or passed it; a caller that stopped
// waiting before the list ended is not waited for. An item of a list with one caller is
// computed for it alone.
func TestSharedListsComputeOncePerItem(t *testing.T) {
	ctx := context.Background()
	g := gatedDataplanes(t, 3)
	s := SharedLists(g).(*sharedLists)
	first := listIn(ctx, s)
	waitUntil(t, "the first list reaches the store", func() bool { return g.lists.Load() == 1 })
	second := listIn(ctx, s)
	leftCtx, leave := context.WithCancel(ctx)
	left := listIn(leftCtx, s)
	waitUntil(t, "two callers join", func() bool { return s.joined() == 2 })
	leave()
	if l := <-left; l.err == nil {
		t.Fatal("the caller that stopped waiting got the list")
	}
	close(g.gate)
	a, b := <-first, <-second
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}

	var computed atomic.Int32
	compute := func(it Item) string { computed.Add(1); return "decoded " + string(it.Doc) }
	// the first caller takes every item, the second the first item only
	for i, it := range a.items {
		if got, want := Shared(it, compute), "decoded doc-"+fmt.Sprint(i); got != want {
			t.Fatalf("item %d: %q, want %q", i, got, want)
		}
	}
	if n := computed.Load(); n != 3 {
		t.Fatalf("%d computed for 3 items", n)
	}
	for i, it := range a.items {
		if it.shared.v == nil {
			t.Fatalf("item %d's value dropped before the second caller took or passed it", i)
		}
	}
	if got := Shared(b.items[0], compute); got != "decoded doc-0" || computed.Load() != 3 {
		t.Fatalf("the second caller's item 0: %q, %d computed; want the first's value, none computed again", got, computed.Load())
	}
	Pass(b.items[1])
	Pass(b.items[2])
	for i, it := range a.items {
		if it.shared.v != nil {
			t.Fatalf("item %d's value kept after both callers took or passed it (the caller that left counted?)", i)
		}
	}
	if got := Shared(a.items[0], compute); got != "decoded doc-0" || computed.Load() != 4 {
		t.Fatalf("an item asked again once dropped: %q, %d computed; want it computed again", got, computed.Load())
	}

	alone := <-listIn(ctx, s) // one caller: nothing shared
	if alone.err != nil || alone.items[0].shared != nil {
		t.Fatalf("a list of one caller: err %v, items shared %v", alone.err, alone.items[0].shared != nil)
	}
}

// The shared values of changes are found by key and version while they are among the newest
// (at most maxChanges, their documents within maxChangeBytes): a reader that never takes a
// change leaves nothing held for long.
func TestChangeValuesKeepTheNewestOnly(t *testing.T) {
	var c changeValues
	k := func(i int) Key { return Key{"default", "Dataplane", fmt.Sprint("dp-", i)} }
	first := c.value(k(0), 1, 3, 100)
	if c.value(k(0), 1, 3, 100) != first || c.value(k(0), 2, 3, 100) == first {
		t.Fatal("a change's value not found by key and version")
	}
	for i := 1; i <= maxChanges; i++ {
		c.value(k(i), int64(i+2), 3, 100)
	}
	if len(c.m) != maxChanges || len(c.order) != maxChanges || c.value(k(0), 1, 3, 100) == first {
		t.Fatalf("%d values held (order %d), the oldest still found: want the newest %d", len(c.m), len(c.order), maxChanges)
	}
	c.value(k(-1), 1, 3, maxChangeBytes)
	if len(c.m) != 1 || c.bytes != maxChangeBytes {
		t.Fatalf("after a change of %d bytes: %d values of %d bytes held, want it alone", maxChangeBytes, len(c.m), c.bytes)
	}
}

// A reader passing an item does not wait for another computing it (the zones pass the
// dataplanes of a mesh without Routers while the feed decodes them).
func TestPassWaitsForNoCompute(t *testing.T) {
	items := []Item{{Key: Key{"default", "Dataplane", "dp-0"}}}
	share(items, 2)
	computing, release := make(chan struct{}), make(chan struct{})
	got := make(chan string, 1)
	go func() {
		got <- Shared(items[0], func(Item) string { close(computing); <-release; return "decoded" })
	}()
	<-computing
	passed := make(chan struct{})
	go func() { Pass(items[0]); close(passed) }()
	select {
	case <-passed:
	case <-time.After(10 * time.Second):
		t.Fatal("Pass waited for the other reader's compute")
	}
	close(release)
	if v := <-got; v != "decoded" {
		t.Fatalf("the computing reader got %q", v)
	}
	if items[0].shared.v != nil {
		t.Fatal("the value kept after both readers were done")
	}
}

// gatedDataplanes is a one-member etcd holding n Dataplanes (dp-<i>, document doc-<i>),
// behind a gate that holds its lists.
func gatedDataplanes(t *testing.T, n int) *gatedStore {
	t.Helper()
	base := NewEtcd(etcdtest.Start(t, 1).Client(), "/kuma")
	for i := range n {
		if _, err := base.Put(context.Background(), Key{"default", "Dataplane", fmt.Sprint("dp-", i)}, []byte(fmt.Sprint("doc-", i)), Any); err != nil {
			t.Fatal(err)
		}
	}
	return &gatedStore{Store: base, gate: make(chan struct{})}
}
