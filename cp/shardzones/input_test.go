package shardzones

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

func inMesh(m string, it store.Item) store.Item {
	it.Mesh = m
	it.Doc = []byte(strings.ReplaceAll(string(it.Doc), "mesh: default", "mesh: "+m))
	return it
}

// The view decodes a resource once, when it is listed or changes, never at a build; it keeps
// only the dataplanes a Router selects, and does not even decode those of a mesh where no
// Router selects any. (The zones used to keep every document as stored and decode every one
// of them at each build.)
func TestViewDecodesEachChangeOnceAndKeepsOnlyReplicas(t *testing.T) {
	items := []store.Item{item("Router", "shard1", 1, router)}
	for i := range 3 {
		items = append(items, item("Dataplane", fmt.Sprint("gw-", i), 2, dp(fmt.Sprint("gw-", i), fmt.Sprint("10.0.0.", i+1), "gw")))
	}
	for i := range 50 {
		items = append(items, item("Dataplane", fmt.Sprint("web-", i), 3, dp(fmt.Sprint("web-", i), "10.0.1.1", "web")))
		items = append(items, inMesh("other", item("Dataplane", fmt.Sprint("web-", i), 3, dp(fmt.Sprint("web-", i), "10.0.2.1", "gw"))))
	}
	items = append(items, item("Route", "www", 5, route("www", "www.acme.test", "None", "True")))
	v := newView(nil)
	v.load(items)
	if want := 1 + 3 + 50 + 1; v.decodes != want {
		t.Fatalf("%d documents decoded listing the store, want %d (mesh other has no Router: its dataplanes are not decoded)", v.decodes, want)
	}
	if len(v.replicas) != 3 || len(v.users) != 1 {
		t.Fatalf("kept %d dataplanes and %d user names, want the 3 gateways and 1", len(v.replicas), len(v.users))
	}
	zoneOf := func() authdns.Router {
		t.Helper()
		in := v.input(nil)
		if len(in.Routers) != 1 {
			t.Fatalf("routers %+v", in.Routers)
		}
		return in.Routers[0]
	}
	for range 3 {
		zoneOf()
	}
	if v.decodes != 55 {
		t.Fatalf("%d documents decoded after three builds, want none more than the list's 55", v.decodes)
	}
	if z := zoneOf(); len(z.Replicas) != 3 || z.Revision != 5 {
		t.Fatalf("zone %+v, want 3 replicas at revision 5", z)
	}

	if v.take(item("Dataplane", "web-7", 9, dp("web-7", "10.0.1.7", "web"))) || v.decodes != 56 || len(v.replicas) != 3 {
		t.Fatalf("a dataplane the router does not select changed: %d decoded, %d kept", v.decodes, len(v.replicas))
	}
	v.take(item("Dataplane", "gw-0", 10, dp("gw-0", "10.0.0.1", "web")))
	if z := zoneOf(); len(z.Replicas) != 2 || z.Replicas[0].Name != "gw-1" {
		t.Fatalf("gw-0 no longer selected: zone replicas %+v, want gw-1 and gw-2", z.Replicas)
	}
	v.take(item("Dataplane", "gw-3", 11, dp("gw-3", "10.0.0.4", "gw")))
	if z := zoneOf(); len(z.Replicas) != 3 || z.Revision != 11 {
		t.Fatalf("gw-3 selected: zone %+v, want 3 replicas at revision 11", z)
	}
	v.remove(store.Key{Mesh: "default", Type: "Dataplane", Name: "gw-3"})
	if z := zoneOf(); len(z.Replicas) != 2 {
		t.Fatalf("gw-3 deleted: zone replicas %+v", z.Replicas)
	}
	if v.take(item("Router", "shard1", 12, router+"status:\n  replicas: [{name: gw-1, address: 10.0.0.2, ready: true}]\n")) {
		t.Fatal("a Router's status changed (the same selector): the store listed again for nothing")
	}
	if v.take(item("Router", "shard1", 13, strings.Replace(router, "service: gw", "service: web", 1))) == false {
		t.Fatal("a Router selecting other dataplanes: the store not listed again (its replicas are not kept)")
	}
	v.remove(store.Key{Mesh: "default", Type: "Router", Name: "shard1"})
	if len(v.routers) != 0 || len(v.replicas) != 0 {
		t.Fatalf("the Router deleted: %d routers, %d dataplanes kept, want none", len(v.routers), len(v.replicas))
	}
}

// Run on a real etcd: a Router written after its dataplanes gets them as replicas (the
// dataplanes were not kept: the store is listed again), and follows its selector when it
// changes; a dataplane written after the Router joins its zone; the Router deleted, its zone
// goes.
func TestRunRouterAfterItsDataplanes(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	put := func(it store.Item) {
		t.Helper()
		if _, err := st.Put(ctx, it.Key, it.Doc, store.Any); err != nil {
			t.Fatal(err)
		}
	}
	put(item("Dataplane", "gw-1", 0, dp("gw-1", "10.0.0.1", "gw")))
	put(item("Dataplane", "gw-2", 0, dp("gw-2", "10.0.0.2", "gw")))
	put(item("Dataplane", "edge-1", 0, dp("edge-1", "10.0.0.9", "edge")))
	for i := range 20 {
		put(item("Dataplane", fmt.Sprint("web-", i), 0, dp(fmt.Sprint("web-", i), "10.0.1.1", "web")))
	}
	var cat atomic.Pointer[authdns.Catalog]
	go Run(ctx, st, authdns.Input{DefaultNSAddr: netip.MustParseAddr("192.0.2.53")}, nil, nil, func(z *Zones) { cat.Store(z.All) })
	wait := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := "no build"
			if c := cat.Load(); c != nil {
				got = strings.Join(shardAddrs(c), ",")
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the zone answers %q, want %q", what, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("no router", "")
	put(item("Router", "shard1", 0, router))
	wait("the router written after its dataplanes", "10.0.0.1,10.0.0.2")
	put(item("Dataplane", "gw-3", 0, dp("gw-3", "10.0.0.3", "gw")))
	wait("a gateway written after the router", "10.0.0.1,10.0.0.2,10.0.0.3")
	put(item("Router", "shard1", 0, strings.Replace(router, "service: gw", "service: edge", 1)))
	wait("the router selecting other dataplanes", "10.0.0.9")
	if err := st.Delete(ctx, store.Key{Mesh: "default", Type: "Router", Name: "shard1"}, store.Any); err != nil {
		t.Fatal(err)
	}
	wait("the router deleted", "")
}
