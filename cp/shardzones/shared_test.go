package shardzones

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Two control-plane replicas on one etcd, one router with two gateway replicas: gw-1's agent
// holds a stream to replica 1, gw-2's to replica 2; each replica publishes its agents
// (store.Presence), replica 1 leads and writes the router's status from both (routerstatus).
// Both replicas answer the shard's names with both gateways (each used to answer with its
// own agents' only, so replicas - and the agents and secondaries following each - gave
// different answers); gw-1's agent goes away: both drop it; replica 2 stops: its gateway
// leaves the leader's answers too, within the presence lease.
func TestReadinessSharedBetweenReplicas(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	for _, it := range []store.Item{
		item("Router", "shard1", 0, router),
		item("Dataplane", "gw-1", 0, dp("gw-1", "10.0.0.1", "gw")),
		item("Dataplane", "gw-2", 0, dp("gw-2", "10.0.0.2", "gw")),
	} {
		if _, err := st.Put(ctx, it.Key, it.Doc, store.Any); err != nil {
			t.Fatal(err)
		}
	}
	type replica struct {
		connected sync.Map // "mesh/name" -> true
		pres      *store.Presence
		cat       atomic.Pointer[authdns.Catalog]
		stop      context.CancelFunc
	}
	start := func(id string, leads bool) *replica {
		r := &replica{}
		rctx, cancel := context.WithCancel(ctx)
		r.stop = cancel
		t.Cleanup(cancel)
		r.pres = store.NewEtcd(c.Client(), "/kuma").Presence("agents", id, time.Second)
		go r.pres.Run(rctx)
		go func() { // as fanout's ShareAgents: the agents connected here, published
			for rctx.Err() == nil {
				var names []string
				r.connected.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
				r.pres.Publish(names)
				time.Sleep(20 * time.Millisecond)
			}
		}()
		if leads {
			online := func(m, name string) bool {
				_, ok := r.connected.Load(m + "/" + name)
				return ok || r.pres.Elsewhere(m+"/"+name)
			}
			go (&routerstatus.Writer{Store: st, Online: online, Poll: 20 * time.Millisecond}).Run(rctx)
		}
		go Run(rctx, st, authdns.Input{}, nil, nil, func(z *Zones) { r.cat.Store(z.All) })
		return r
	}
	answer := func(r *replica) []string {
		cat := r.cat.Load()
		if cat == nil {
			return nil
		}
		return shardAddrs(cat)
	}
	wait := func(what string, rs []*replica, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ok := true
			var got []string
			for _, r := range rs {
				a := strings.Join(answer(r), ",")
				got = append(got, a)
				ok = ok && a == want
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the replicas answer %q, want %q from each", what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	r1, r2 := start("replica-1", true), start("replica-2", false)
	r1.connected.Store("default/gw-1", true)
	r2.connected.Store("default/gw-2", true)
	wait("each gateway's agent on another replica", []*replica{r1, r2}, "10.0.0.1,10.0.0.2")
	r1.connected.Delete("default/gw-1")
	wait("gw-1's agent gone", []*replica{r1, r2}, "10.0.0.2")
	r1.connected.Store("default/gw-1", true)
	wait("gw-1's agent back", []*replica{r1, r2}, "10.0.0.1,10.0.0.2")
	r2.stop()
	wait("replica 2 stopped", []*replica{r1}, "10.0.0.1")
}

// shardAddrs are the addresses cat answers for a name of shard1's zone, sorted.
func shardAddrs(cat *authdns.Catalog) []string {
	req := new(dns.Msg)
	req.SetQuestion("x.shard1.apps.test.", dns.TypeA)
	var out []string
	for _, rr := range cat.Answer(req).Answer {
		out = append(out, rr.(*dns.A).A.String())
	}
	slices.Sort(out)
	return out
}
