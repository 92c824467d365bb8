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
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Two control-plane replicas on one etcd, one router with two gateway replicas: gw-1's agent
// holds a stream to replica 1, gw-2's to replica 2. Both replicas answer the shard's names
// with both gateways (each used to answer with its own agents' only, so replicas - and the
// agents and secondaries following each - gave different answers); gw-1's agent goes away:
// both drop it; replica 1 stops: its gateways leave the other's answers too.
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
		connected sync.Map // dataplane name -> true
		cat       atomic.Pointer[authdns.Catalog]
		stop      context.CancelFunc
	}
	start := func(id string) *replica {
		r := &replica{}
		rctx, cancel := context.WithCancel(ctx)
		r.stop = cancel
		t.Cleanup(cancel)
		pres := store.NewEtcd(c.Client(), "/kuma").Presence("gateways", id, time.Second)
		go pres.Run(rctx)
		local := func(_, name string) bool { _, ok := r.connected.Load(name); return ok }
		go Run(rctx, st, authdns.Input{}, local, pres, nil, nil, func(cat *authdns.Catalog) { r.cat.Store(cat) })
		return r
	}
	answer := func(r *replica) []string {
		cat := r.cat.Load()
		if cat == nil {
			return nil
		}
		req := new(dns.Msg)
		req.SetQuestion("x.shard1.apps.test.", dns.TypeA)
		var out []string
		for _, rr := range cat.Answer(req).Answer {
			out = append(out, rr.(*dns.A).A.String())
		}
		slices.Sort(out)
		return out
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
	r1, r2 := start("replica-1"), start("replica-2")
	r1.connected.Store("gw-1", true)
	r2.connected.Store("gw-2", true)
	wait("each gateway's agent on another replica", []*replica{r1, r2}, "10.0.0.1,10.0.0.2")
	r1.connected.Delete("gw-1")
	wait("gw-1's agent gone", []*replica{r1, r2}, "10.0.0.2")
	r1.connected.Store("gw-1", true)
	wait("gw-1's agent back", []*replica{r1, r2}, "10.0.0.1,10.0.0.2")
	r1.stop()
	wait("replica 1 stopped", []*replica{r2}, "10.0.0.2")
}
