package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

func dataplaneDoc(name, version string) []byte {
	return fmt.Appendf(nil, "type: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 8080\n      tags:\n        kuma.io/service: web\n        version: %s\n", name, version)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The feed follows a real etcd: writes and deletes reach what agents are served, each
// change decoded once; a compaction past what it follows makes it read everything again; the
// watch lag returns to zero.
func TestFeedFollowsTheStore(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	st := cpstore.NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := func(name string) cpstore.Key {
		return cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}
	}
	for i := range 3 {
		if _, err := st.Put(ctx, key(fmt.Sprintf("dp-%d", i)), dataplaneDoc(fmt.Sprintf("dp-%d", i), "v0"), cpstore.Any); err != nil {
			t.Fatal(err)
		}
	}
	cp := New(nil, slog.New(slog.DiscardHandler))
	feed := NewFeed(st, cp, slog.New(slog.DiscardHandler))
	ran := make(chan struct{})
	go func() { defer close(ran); feed.Run(ctx) }()
	served := func() map[string][]byte { return cp.Resources("default", mesh.KindDataplane) }
	waitUntil(t, "the first read", func() bool { return feed.Synced() && len(served()) == 3 })

	if _, err := st.Put(ctx, key("dp-1"), dataplaneDoc("dp-1", "v1"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, key("dp-2"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the change and the delete", func() bool {
		s := served()
		return len(s) == 2 && strings.Contains(string(s["dp-1"]), "version: v1")
	})
	waitUntil(t, "the watch lag back to zero", func() bool {
		n, d := feed.Lag()
		return n == 0 && d == 0 && feed.SeenRevision() == feed.Revision()
	})
	// Only the changed resource was decoded again: the others' cache entries are the same.
	before := feed.docs.decodes.Load()
	if _, err := st.Put(ctx, key("dp-0"), dataplaneDoc("dp-0", "v2"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "dp-0 changed", func() bool { return strings.Contains(string(served()["dp-0"]), "version: v2") })
	if n := feed.docs.decodes.Load() - before; n != 1 {
		t.Fatalf("one change decoded %d documents, want 1", n)
	}

	// A compaction past the revision followed, while the feed's watch is cut: it re-lists.
	rev := feed.Revision()
	cancel()
	<-ran
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if _, err := st.Put(ctx2, key("dp-3"), dataplaneDoc("dp-3", "v0"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	c.Compact(ctx2, cl)
	go func() {
		// follow from the old revision: the store says it was compacted; Run lists again.
		feed.follow(ctx2, rev)
		feed.Run(ctx2)
	}()
	waitUntil(t, "the re-list after the compaction", func() bool { return served()["dp-3"] != nil && feed.Revision() > rev })
}

func TestCompareKeysAsStrings(t *testing.T) {
	keys := []cpstore.Key{{Mesh: "a", Type: "T", Name: "x"}, {Mesh: "a-b", Type: "T", Name: "x"}, {Mesh: "a", Type: "T", Name: "x-1"},
		{Mesh: "a", Type: "TT", Name: "a"}, {Mesh: "ab", Type: "", Name: ""}, {Mesh: "a", Type: "T", Name: "x"}, {Mesh: "", Type: "a", Name: "b"}}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := compareKeys(a, b), strings.Compare(a.String(), b.String()); got != want {
				t.Errorf("compareKeys(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// A resource's creation time, as the agents are served it (it orders collisions: of two
// TrafficRoutes that rank the same, the older wins), is the store's: a creationTime in the
// document (a file exported from elsewhere) does not make a new resource the oldest.
func TestFeedServesTheStoresCreationTime(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := cpstore.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doc := append([]byte("creationTime: \"2000-01-01T00:00:00Z\"\n"), dataplaneDoc("dp-0", "v0")...)
	it, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "dp-0"}, doc, cpstore.Any)
	if err != nil {
		t.Fatal(err)
	}
	cp := New(nil, slog.New(slog.DiscardHandler))
	feed := NewFeed(st, cp, slog.New(slog.DiscardHandler))
	go feed.Run(ctx)
	waitUntil(t, "the first read", func() bool { return feed.Synced() && len(cp.Resources("default", mesh.KindDataplane)) == 1 })
	body := string(cp.Resources("default", mesh.KindDataplane)["dp-0"])
	if strings.Contains(body, "2000-01-01") || !strings.Contains(body, it.Created.Format("2006-01-02")) {
		t.Fatalf("served with the document's creation time, not the store's (%s):\n%s", it.Created, body)
	}
}

// listStore is a Store whose List gives items (the feed's relist only lists).
type listStore struct {
	cpstore.Store
	items []cpstore.Item
}

func (s listStore) List(context.Context, string, string, string, int) ([]cpstore.Item, string, int64, error) {
	return s.items, "", 1, nil
}

// What the feed holds after reading the store is what agents are served: not the documents
// as stored (here each carries a 64 KiB comment that its served encoding drops).
func TestFeedKeepsNoStoredDocument(t *testing.T) {
	const n, pad = 200, 64 << 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	items := make([]cpstore.Item, n)
	for i := range items {
		name := fmt.Sprintf("dp-%d", i)
		doc := append([]byte("# "+strings.Repeat("x", pad)+"\n"), dataplaneDoc(name, "v1")...)
		items[i] = cpstore.Item{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}, Doc: doc, Version: int64(i + 1)}
	}
	cp := New(nil, slog.New(slog.DiscardHandler))
	feed := NewFeed(listStore{items: items}, cp, slog.New(slog.DiscardHandler))
	items = nil
	if _, err := feed.relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	feed.st = nil // the fake store holds the documents itself
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := len(cp.Resources("default", mesh.KindDataplane)); got != n {
		t.Fatalf("%d dataplanes served, want %d", got, n)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*pad/4 {
		t.Fatalf("the feed holds %d bytes for %d dataplanes of %d stored bytes each: the stored documents are kept", grew, n, pad)
	}
	runtime.KeepAlive(feed)
}

// The store read at start is decoded on every core, each resource once, whatever their
// number; a resource that does not decode is logged once (not at every change served) and
// the others are served.
func TestFeedDecodesTheStoreOnceInParallel(t *testing.T) {
	const n = 1000
	items := make([]cpstore.Item, 0, n+1)
	for i := range n {
		name := fmt.Sprintf("dp-%04d", i)
		items = append(items, cpstore.Item{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}, Doc: dataplaneDoc(name, "v1"), Version: int64(i + 1)})
	}
	items = append(items, cpstore.Item{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "broken"}, Doc: []byte("type: Dataplane\nname: broken\nnetworking: 7\n"), Version: n + 1})
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cp := New(nil, log)
	feed := NewFeed(listStore{items: items}, cp, log)
	if _, err := feed.relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := feed.docs.decodes.Load(); got != n+1 {
		t.Fatalf("%d documents decoded, want %d", got, n+1)
	}
	served := cp.Resources("default", mesh.KindDataplane)
	if len(served) != n || !strings.Contains(string(served["dp-0999"]), "name: dp-0999") {
		t.Fatalf("%d served (dp-0999: %q), want %d", len(served), served["dp-0999"], n)
	}
	feed.apply(cpstore.Event{Type: cpstore.Put, Revision: n + 2, Item: cpstore.Item{Key: items[0].Key, Doc: dataplaneDoc("dp-0000", "v2"), Version: n + 2}})
	feed.serve()
	feed.serve()
	if got := feed.docs.decodes.Load(); got != n+2 {
		t.Fatalf("%d documents decoded after one change, want %d", got, n+2)
	}
	if c := strings.Count(logged.String(), "cannot be served"); c != 1 {
		t.Fatalf("the broken resource logged %d times, want once:\n%s", c, logged.String())
	}
	if !strings.Contains(string(cp.Resources("default", mesh.KindDataplane)["dp-0000"]), "version: v2") {
		t.Fatal("the change is not served")
	}
}

// A document stored under another key than its own (written by hand) is served as its
// document says, as before; a HostnameGenerator for every mesh, stored under mesh default,
// to every mesh.
func TestFeedServesADocumentAsItSays(t *testing.T) {
	cp := New(nil, slog.New(slog.DiscardHandler))
	feed := NewFeed(nil, cp, slog.New(slog.DiscardHandler))
	feed.applyStore(feed.load([]cpstore.Item{
		{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "by-hand"}, Doc: dataplaneDoc("dp-own", "v1"), Version: 1},
		{Key: cpstore.Key{Mesh: "default", Type: mesh.KindHostnameGenerator, Name: "all"}, Version: 2,
			Doc: []byte("type: HostnameGenerator\nname: all\nspec:\n  selector:\n    meshService:\n      matchLabels: {}\n  template: '{{ .DisplayName }}.all'\n")},
	}))
	if got := cp.Resources("default", mesh.KindDataplane); len(got) != 1 || got["dp-own"] == nil {
		t.Fatalf("served %v, want dp-own only", got)
	}
	if got := cp.Resources("other", mesh.KindHostnameGenerator); len(got) != 1 || got["all"] == nil {
		t.Fatalf("mesh other is served HostnameGenerators %v, want all", got)
	}
}

// Routes of one name in two namespaces are served as two resources (named name.namespace,
// as stored), not one taking the other's place.
func TestFeedServesSameNamedRoutesOfTwoNamespaces(t *testing.T) {
	cp := New(nil, slog.New(slog.DiscardHandler))
	f := NewFeed(nil, cp, slog.New(slog.DiscardHandler))
	var items []cpstore.Item
	for i, ns := range []string{"shop", "blog"} {
		k := cpstore.Key{Mesh: "default", Type: mesh.KindRoute, Name: mesh.RouteKeyName(ns, "store")}
		doc := fmt.Appendf(nil, "type: Route\nmesh: default\nname: store\nnamespace: %s\nhost: www\nto: {service: web, port: 8080}\n", ns)
		items = append(items, cpstore.Item{Key: k, Doc: doc, Version: int64(i + 1), Created: time.Unix(1, 0)})
	}
	f.applyStore(f.load(items))
	got := slices.Sorted(maps.Keys(cp.Resources("default", mesh.KindRoute)))
	if !slices.Equal(got, []string{"store.blog", "store.shop"}) {
		t.Fatalf("routes served %v, want store.blog and store.shop", got)
	}
}

func TestFeedServesRoutersWithoutStatus(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := cpstore.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := cpstore.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard1"}
	router := "type: Router\nmesh: default\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n"
	it, err := st.Put(ctx, k, []byte(router+"status: {desiredReplicas: 2, readyReplicas: 1}\n"), cpstore.Any)
	if err != nil {
		t.Fatal(err)
	}
	cp := New(nil, slog.New(slog.DiscardHandler))
	feed := NewFeed(st, cp, slog.New(slog.DiscardHandler))
	go feed.Run(ctx)
	waitUntil(t, "the router served", func() bool { return feed.Synced() && len(cp.Resources("default", mesh.KindRouter)) == 1 })
	body := cp.Resources("default", mesh.KindRouter)["shard1"]
	if strings.Contains(string(body), "status") || !strings.Contains(string(body), "shard1.apps.test") {
		t.Fatalf("served:\n%s", body)
	}
	head := cp.tableFor("default", mesh.KindRouter).head()
	it, err = st.Put(ctx, k, []byte(router+"status: {desiredReplicas: 2, readyReplicas: 2}\n"), it.Version)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the status change read", func() bool { return feed.Revision() >= it.Version })
	if h := cp.tableFor("default", mesh.KindRouter).head(); h != head {
		t.Errorf("a status-only change was a change for the agents: head %d -> %d", head, h)
	}
	if _, err := st.Put(ctx, k, []byte(strings.Replace(router, "shard1.apps.test", "shard-one.apps.test", 1)), it.Version); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a change of the router itself served", func() bool {
		return strings.Contains(string(cp.Resources("default", mesh.KindRouter)["shard1"]), "shard-one.apps.test")
	})
}

// Two replicas holding the same resources report the same content revision, whether they
// followed the changes or read the store after them - a delete of the newest resource and a
// write of a key that holds no resource included (both move etcd's revision; only the
// delete changes what is served).
func TestFeedContentRevisionIsTheSameOnEveryReplica(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	st := cpstore.NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := func(name string) cpstore.Key {
		return cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: name}
	}
	for i := range 3 {
		if _, err := st.Put(ctx, key(fmt.Sprintf("dp-%d", i)), dataplaneDoc(fmt.Sprintf("dp-%d", i), "v0"), cpstore.Any); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *Feed {
		feed := NewFeed(st, New(nil, slog.New(slog.DiscardHandler)), slog.New(slog.DiscardHandler))
		go feed.Run(ctx)
		waitUntil(t, "the first read", feed.Synced)
		return feed
	}
	following := start()
	if err := st.Delete(ctx, key("dp-2"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Get(ctx, "/kuma/default/Dataplane/dp-2")
	if err != nil {
		t.Fatal(err)
	}
	deletedAt := r.Header.Revision
	if _, err := cl.Put(ctx, "/unrelated", "x"); err != nil { // etcd's revision moves on
		t.Fatal(err)
	}
	waitUntil(t, "the delete followed", func() bool { return following.ContentRevision() == deletedAt })
	listing := start()
	if got := listing.ContentRevision(); got != deletedAt {
		t.Fatalf("a replica that read the store after the delete reports content revision %d, the one that followed it %d", got, deletedAt)
	}
	if listing.Revision() <= deletedAt {
		t.Fatalf("the list's revision %d should count the unrelated write after the delete (%d)", listing.Revision(), deletedAt)
	}
	// A write is the newest change, on both.
	it, err := st.Put(ctx, key("dp-0"), dataplaneDoc("dp-0", "v1"), cpstore.Any)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the write followed by both", func() bool {
		return following.ContentRevision() == it.Version && listing.ContentRevision() == it.Version
	})
}
