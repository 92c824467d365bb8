package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/decoded"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/kumadp/kuma-dp/mesh"
)

// A replica's three followers of the store - the agents' feed, the routers' zones and the
// routers' status - start on one shared list and decode each stored document once between
// them (each decoded its own before: a Router, a Route and every Dataplane of a mesh where a
// Router selects dataplanes three times), and each gets what it got alone: the feed serves
// every resource, the zones answer the router's replicas, the status names them.
func TestFollowersDecodeEachDocumentOnce(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base := store.NewEtcd(c.Client(), "/kuma")
	put := func(m, typ, name, doc string) {
		t.Helper()
		if _, err := base.Put(ctx, store.Key{Mesh: m, Type: typ, Name: name}, []byte(doc), store.Any); err != nil {
			t.Fatal(err)
		}
	}
	dp := func(m, name, ip, svc string) string {
		return "type: Dataplane\nmesh: " + m + "\nname: " + name + "\nnetworking:\n  address: " + ip + "\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: " + svc + "}\n"
	}
	put("default", "Router", "shard1", "type: Router\nmesh: default\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n")
	put("default", "Route", "www", "type: Route\nmesh: default\nname: www\nnamespace: acme\nhost: www.shard1.apps.test\ndnsType: user\nwildcardPolicy: None\n"+
		"to: {service: web, port: 80}\nstatus:\n  phase: scheduled\n  router: shard1\n  ingress:\n  - router: shard1\n    conditions: [{type: Admitted, status: \"True\"}]\n")
	for i := range 20 {
		svc := "web"
		if i < 2 {
			svc = "gw"
		}
		put("default", "Dataplane", fmt.Sprint("dp-", i), dp("default", fmt.Sprint("dp-", i), fmt.Sprint("10.0.0.", i+1), svc))
	}
	for i := range 10 {
		put("other", "Dataplane", fmt.Sprint("dp-", i), dp("other", fmt.Sprint("dp-", i), fmt.Sprint("10.1.0.", i+1), "web"))
	}
	const stored = 1 + 1 + 20 + 10

	// every change written from here on (the leader's statuses included), counted
	_, _, listRev, err := base.List(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var puts, lastPut atomic.Int64
	go func() {
		for e := range base.Watch(ctx, listRev) {
			if e.Type == store.Put {
				puts.Add(1)
				lastPut.Store(e.Revision)
			}
		}
	}()

	held, lists, open := store.Gated(base)
	shared := store.SharedLists(held)
	log := slog.New(slog.DiscardHandler)
	before := decoded.Count()

	cp := fanout.New(nil, log)
	feed := fanout.NewFeed(shared, cp, log)
	go feed.Run(ctx)
	var zones atomic.Pointer[shardzones.Zones]
	go shardzones.Run(ctx, shared, authdns.Input{}, nil, log, func(z *shardzones.Zones) { zones.Store(z) })
	var statusListed sync.Once
	listedCh, online := make(chan struct{}), atomic.Bool{}
	rm := &routerstatus.Metrics{}
	w := &routerstatus.Writer{Store: shared, Log: log, Metrics: rm, Poll: 20 * time.Millisecond,
		Online: func(string, string) bool { return true },
		// called at each pass, the first right after the list: no status written until the
		// decodes are counted
		OnlineKnown: func() bool { statusListed.Do(func() { close(listedCh) }); return online.Load() }}
	// the leader's writer starts once the others' list is under way (it lists only what it
	// follows when none is)
	testutil.WaitFor(t, "the feed and the zones on one list", 10*time.Second, func() bool { return lists() == 1 && store.JoinedCount(shared) == 1 })
	go w.Run(ctx)
	testutil.WaitFor(t, "the three followers on one list", 10*time.Second, func() bool { return lists() == 1 && store.JoinedCount(shared) == 2 })
	open()
	testutil.WaitFor(t, "the feed synced", 10*time.Second, feed.Synced)
	testutil.WaitFor(t, "the zones built", 10*time.Second, func() bool { return zones.Load() != nil })
	select {
	case <-listedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the status writer did not list within 10 s")
	}
	if n := decoded.Count() - before; n != stored {
		t.Errorf("%d documents decoded by the three followers for %d stored, want each once", n, stored)
	}
	if n := lists(); n != 1 {
		t.Errorf("the store listed %d times, want once for the three", n)
	}

	// what each got of it
	if d, o, r := len(cp.Resources("default", mesh.KindDataplane)), len(cp.Resources("other", mesh.KindDataplane)), len(cp.Resources("default", mesh.KindRouter)); d != 20 || o != 10 || r != 1 {
		t.Errorf("the feed serves %d + %d dataplanes and %d routers, want 20 + 10 and 1", d, o, r)
	}
	if got := shardAnswer(zones.Load()); got != "10.0.0.1,10.0.0.2" {
		t.Errorf("the zones answer the shard with %q, want its two gateways (no status yet: both)", got)
	}

	// Changes: each decoded once too, whichever follower takes it first. The leader writes
	// the Router's status, a gateway moves, the leader writes it again: each a change the
	// three read.
	testutil.WaitFor(t, "the three followers watching", 10*time.Second, func() bool { return store.Watches(shared) == 3 })
	online.Store(true)
	testutil.WaitFor(t, "the status writer's pass", 10*time.Second, func() bool {
		c, ok := rm.Counts()[routerstatus.RouterKey{Mesh: "default", Name: "shard1"}]
		return ok && c.Ready == 2
	})
	put("default", "Dataplane", "dp-0", dp("default", "dp-0", "10.0.0.9", "gw"))
	testutil.WaitFor(t, "the zones answer the gateway's new address", 10*time.Second, func() bool { return shardAnswer(zones.Load()) == "10.0.0.2,10.0.0.9" })
	testutil.WaitFor(t, "the feed serves every change", 10*time.Second, func() bool { return feed.Revision() >= lastPut.Load() })
	if n, p := decoded.Count()-before, puts.Load(); n != stored+p || p < 3 {
		t.Errorf("%d documents decoded for %d stored and %d changes, want each once (at least 3 changes: the gateway, two statuses)", n, stored, p)
	}
}

// shardAnswer is the addresses z answers for a name of shard1.apps.test in mesh default.
func shardAnswer(z *shardzones.Zones) string {
	req := new(dns.Msg)
	req.SetQuestion("x.shard1.apps.test.", dns.TypeA)
	var addrs []string
	for _, rr := range z.Meshes["default"].Answer(req).Answer {
		addrs = append(addrs, rr.(*dns.A).A.String())
	}
	slices.Sort(addrs)
	return strings.Join(addrs, ",")
}
