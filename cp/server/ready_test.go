package server

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// heldLists is a store whose lists wait until open is closed.
type heldLists struct {
	cpstore.Store
	open chan struct{}
}

func (h heldLists) List(ctx context.Context, m, typ, after string, limit int) ([]cpstore.Item, string, int64, error) {
	<-h.open
	return h.Store.List(ctx, m, typ, after, limit)
}

// A replica is not ready before the routers' zones are built and served, though the store
// is read and the agents' feed synced (it said ready then: agents connecting were served
// no zone, and --dns-address refused the routers' names); once they are - on --dns-address too,
// which answers them - it is.
func TestNotReadyBeforeTheZonesAreServed(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	st := cpstore.NewEtcd(c.Client(), "/kuma")
	if _, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: "Router", Name: "shard1"},
		[]byte("type: Router\nmesh: default\nname: shard1\ndns: shard1.apps.test\n"), cpstore.Any); err != nil {
		t.Fatal(err)
	}
	p := &etcdParts{st: st, health: st.Health(time.Second, log), feed: fanout.NewFeed(st, fanout.New(nil, log), log)}
	go p.health.Run(ctx)
	go p.feed.Run(ctx)
	held := heldLists{Store: st, open: make(chan struct{})}
	sc := &StoreConfig{Etcd: cli.Etcd{Prefix: "/kuma"}, DNS: DNSConfig{Address: "127.0.0.1:0"}}
	var srv atomic.Pointer[authdns.Server]
	var servedFirst atomic.Bool // --dns-address served the zones before the replica said ready
	readySink := func(z *shardzones.Zones) {
		if s := srv.Load(); s != nil && s.Catalog() == z.All {
			servedFirst.Store(true)
		}
		p.zones.Store(z.All)
	}
	s, err := sc.shardDNS(ctx, held, c.Client(), func() bool { return true }, p.feed, log, readySink)
	if err != nil {
		t.Fatal(err)
	}
	srv.Store(s)
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10 s: %s (ready: %v)", what, p.ready())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("the store reached and the feed synced", func() bool { return p.health.Err() == nil && p.feed.Synced() })
	if err := p.ready(); err == nil || !strings.Contains(err.Error(), "zones are not built") {
		t.Fatalf("ready before the zones are built: %v", err)
	}
	close(held.open)
	wait("ready once the zones are served", func() bool { return p.ready() == nil })
	if z := p.zones.Load(); z == nil || z.Zone("shard1.apps.test") == nil {
		t.Fatal("ready without the router's zone")
	}
	if !servedFirst.Load() {
		t.Error("ready before --dns-address served the routers' zones")
	}
	udp, _ := s.Addrs()
	r, _, err := new(dns.Client).Exchange(new(dns.Msg).SetQuestion("shard1.apps.test.", dns.TypeSOA), udp.String())
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("once ready, --dns-address answers the router's SOA with %v (error %v), want it", r, err)
	}
}
