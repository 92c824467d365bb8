package routerstatus

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

// online is a set of dataplanes whose agents are connected, changed by the test.
type online struct {
	mu  sync.Mutex
	set map[string]bool
}

func (o *online) is(_, name string) bool { o.mu.Lock(); defer o.mu.Unlock(); return o.set[name] }
func (o *online) put(name string, v bool) {
	o.mu.Lock()
	o.set[name] = v
	o.mu.Unlock()
}

// The writer on a real etcd: a router's status follows its replicas' agents (ready/desired,
// the conditions naming the replica not ready), a status that holds is not written again,
// a Router written without status (a user's apply) gets it back, the metric counts what
// the status says, and a new router finds its replicas among dataplanes stored before it
// (which the writer did not keep while no router selected them).
func TestWriterOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := func(typ, name, doc string) {
		t.Helper()
		if _, err := st.Put(ctx, store.Key{Mesh: "default", Type: typ, Name: name}, []byte(doc), store.Any); err != nil {
			t.Fatal(err)
		}
	}
	router := "type: Router\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n"
	put(mesh.KindRouter, "shard1", router)
	put(mesh.KindDataplane, "gw-a", "type: Dataplane\nname: gw-a\nnetworking: {address: 10.0.0.1, inbound: [{port: 8080, tags: {kuma.io/service: gw}}]}\n")
	put(mesh.KindDataplane, "gw-b", "type: Dataplane\nname: gw-b\nnetworking: {address: 10.0.0.2, gateway: {tags: {kuma.io/service: gw}}}\n")
	on := &online{set: map[string]bool{"gw-a": true, "gw-b": true}}
	m := &Metrics{}
	w := &Writer{Store: st, Online: on.is, Metrics: m, Poll: 20 * time.Millisecond}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()

	status := func() (*mesh.RouterStatus, int64) {
		it, err := st.Get(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard1"})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := mesh.Decode("r", it.Doc)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].(*mesh.Router).Status, it.Version
	}
	wait := func(what string, cond func(*mesh.RouterStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if s, _ := status(); s != nil && cond(s) {
				return
			}
			if time.Now().After(deadline) {
				s, _ := status()
				t.Fatalf("%s: not within 10s; status %+v", what, s)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("2/2 ready", func(s *mesh.RouterStatus) bool { return s.ReadyReplicas == 2 && len(s.Replicas) == 2 })
	_, v := status()
	time.Sleep(10 * w.Poll)
	if _, v2 := status(); v2 != v {
		t.Fatalf("a status that holds was written again: version %d -> %d", v, v2)
	}
	on.put("gw-b", false)
	wait("gw-b not ready, named", func(s *mesh.RouterStatus) bool {
		d := s.Condition(mesh.ConditionDegraded)
		return s.ReadyReplicas == 1 && d.Status == "True" && d.Message == "1 of 2 desired replicas ready; not ready: gw-b (AgentNotConnected)" &&
			s.Condition(mesh.ConditionAvailable).Status == "True"
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // set after the write
		got := m.Counts()[RouterKey{"default", "shard1"}]
		if got == (Counts{Desired: 2, Ready: 1, NotReady: 1}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric counts %+v", got)
		}
	}
	on.put("gw-a", false)
	wait("none ready", func(s *mesh.RouterStatus) bool {
		return s.ReadyReplicas == 0 && s.Condition(mesh.ConditionAvailable).Reason == ReasonNoReadyReplicas
	})
	put(mesh.KindRouter, "shard1", router+"replicas: 3\n") // a user's write, no status
	on.put("gw-a", true)
	on.put("gw-b", true)
	wait("the status back after a write without it", func(s *mesh.RouterStatus) bool {
		return s.ReadyReplicas == 2 && s.DesiredReplicas == 3 && s.Condition(mesh.ConditionDegraded).Message == "2 of 3 desired replicas ready; 2 of 3 exist"
	})
	// a dataplane no router selected (not kept), then a router that selects it: read again
	put(mesh.KindDataplane, "edge-1", "type: Dataplane\nname: edge-1\nnetworking: {address: 10.0.1.1, inbound: [{port: 80, tags: {kuma.io/service: edge}}]}\n")
	put(mesh.KindRouter, "shard2", "type: Router\nname: shard2\ndns: shard2.apps.test\nreplicas: 1\ndataplanes: {kuma.io/service: edge}\n")
	on.put("edge-1", true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		it, err := st.Get(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard2"})
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := mesh.Decode("r", it.Doc)
		if s := rs[0].(*mesh.Router).Status; s != nil && s.ReadyReplicas == 1 && len(s.Replicas) == 1 && s.Replicas[0].Name == "edge-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new router's replicas among the dataplanes stored before it: %s", it.Doc)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if len(m.Counts()) != 0 {
		t.Errorf("a writer that stopped (leadership lost) still counts: %+v", m.Counts())
	}
}

// A leader that does not know the other control-plane replicas' agents yet writes no
// status (it would take their gateways for gone); once it knows, it does.
func TestWriterWaitsUntilOnlineKnown(t *testing.T) {
	c := etcdtest.Start(t, 1)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard1"}
	if _, err := st.Put(ctx, k, []byte("type: Router\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n"), store.Any); err != nil {
		t.Fatal(err)
	}
	var known atomic.Bool
	w := &Writer{Store: st, Online: func(string, string) bool { return false }, OnlineKnown: known.Load, Poll: 10 * time.Millisecond}
	go w.Run(ctx)
	time.Sleep(30 * w.Poll)
	if it, _ := st.Get(ctx, k); strings.Contains(string(it.Doc), "status") {
		t.Fatalf("a status written before the agents were known: %s", it.Doc)
	}
	known.Store(true)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if it, _ := st.Get(ctx, k); strings.Contains(string(it.Doc), "status") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no status within 10s once the agents were known")
		}
	}
}

// listsSeen records the lists asked of a store, as "mesh/type" ("/" for the whole store).
type listsSeen struct {
	store.Store
	mu    sync.Mutex
	lists []string
}

func (l *listsSeen) List(ctx context.Context, m, typ, after string, limit int) ([]store.Item, string, int64, error) {
	l.mu.Lock()
	l.lists = append(l.lists, m+"/"+typ)
	l.mu.Unlock()
	return l.Store.List(ctx, m, typ, after, limit)
}

// A writer that lists alone (a leader elected after the replica's start, no other follower
// listing the whole store) reads the Routers and the Dataplanes of the meshes where one selects
// dataplanes - not the whole store: it read every document of a 100,000-dataplane store, whose
// garbage a replica then held (1.4 KiB of RSS per stored dataplane against 0.7).
func TestWriterAloneListsWhatItFollows(t *testing.T) {
	c := etcdtest.Start(t, 1)
	base := store.NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put := func(m, typ, name, doc string) {
		t.Helper()
		if _, err := base.Put(ctx, store.Key{Mesh: m, Type: typ, Name: name}, []byte(doc), store.Any); err != nil {
			t.Fatal(err)
		}
	}
	put("default", mesh.KindRouter, "shard1", "type: Router\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n")
	put("default", mesh.KindDataplane, "gw-a", "type: Dataplane\nname: gw-a\nnetworking: {address: 10.0.0.1, inbound: [{port: 8080, tags: {kuma.io/service: gw}}]}\n")
	put("default", mesh.KindDataplane, "gw-b", "type: Dataplane\nname: gw-b\nnetworking: {address: 10.0.0.2, gateway: {tags: {kuma.io/service: gw}}}\n")
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		put("other", mesh.KindDataplane, n, "type: Dataplane\nname: "+n+"\nnetworking: {address: 10.1.0.1, inbound: [{port: 8080, tags: {kuma.io/service: gw}}]}\n")
	}
	seen := &listsSeen{Store: base}
	m := &Metrics{}
	w := &Writer{Store: store.SharedLists(seen), Online: func(string, string) bool { return true }, Metrics: m, Poll: 20 * time.Millisecond}
	go w.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for c := m.Counts()[RouterKey{Mesh: "default", Name: "shard1"}]; c.Ready != 2; c = m.Counts()[RouterKey{Mesh: "default", Name: "shard1"}] {
		if time.Now().After(deadline) {
			t.Fatalf("the router's replicas not counted within 10 s: %+v", c)
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if got := strings.Join(seen.lists, " "); got != "/Router default/Dataplane" {
		t.Fatalf("lists asked: %s; want the Routers and mesh default's Dataplanes only", got)
	}
}
