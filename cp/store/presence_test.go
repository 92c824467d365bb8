package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Others are the names every other replica holds, each with the replicas holding it; a
// replica that stops takes its names with it.
func TestPresenceOthers(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopA()
	defer stopB()
	a, b := s.Presence("agents", "replica-a", time.Second), s.Presence("agents", "replica-b", time.Second)
	if a.Listed() {
		t.Fatal("listed before it ran")
	}
	doneA := make(chan struct{})
	go func() { defer close(doneA); a.Run(ctxA) }()
	go b.Run(ctxB)
	a.Publish([]string{"m/a", "m/b"})
	b.Publish([]string{"m/b"})
	for deadline := time.Now().Add(10 * time.Second); !a.Listed() || !b.Listed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the others' names not listed within 10s")
		}
	}
	wait := func(what string, p *Presence, want map[string][]string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !maps.EqualFunc(p.Others(), want, slices.Equal) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want %v", what, p.Others(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("seen by b", b, map[string][]string{"m/a": {"replica-a"}, "m/b": {"replica-a"}})
	wait("seen by a", a, map[string][]string{"m/b": {"replica-b"}})
	stopA()
	<-doneA
	wait("a stopped, seen by b", b, map[string][]string{})
}

// writesKV counts the writes (puts, deletes, transactions) sent to etcd.
type writesKV struct {
	clientv3.KV
	writes atomic.Int64
}

func (w *writesKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	w.writes.Add(1)
	return w.KV.Put(ctx, key, val, opts...)
}

func (w *writesKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	w.writes.Add(1)
	return w.KV.Delete(ctx, key, opts...)
}

func (w *writesKV) Txn(ctx context.Context) clientv3.Txn {
	w.writes.Add(1)
	return w.KV.Txn(ctx)
}

// Many names published at once (the agents of a replica that starts) are a few writes, a
// transaction of at most 128 - they were one write each: 10,000 agents took 54 s to be seen
// on a three-member etcd - and so are many names gone.
func TestPresenceWritesInBatches(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	w := &writesKV{KV: cl.KV}
	cl.KV = w
	s := NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := s.Presence("agents", "replica-a", time.Second), s.Presence("agents", "replica-b", time.Second)
	go a.Run(ctx)
	go b.Run(ctx)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("default/dp-%04d", i)
	}
	seen := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(b.Others()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d names seen, want %d", what, len(b.Others()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := w.writes.Load()
	a.Publish(names)
	seen("1000 published", 1000)
	if n := w.writes.Load() - before; n > 10 {
		t.Errorf("1000 names published in %d writes, want at most 10 (8 transactions of 128)", n)
	}
	before = w.writes.Load()
	a.Publish(names[:100])
	seen("900 gone", 100)
	if n := w.writes.Load() - before; n > 10 {
		t.Errorf("900 names removed in %d writes, want at most 10", n)
	}
}

// A replica compares the names it holds with those it has written when they change (a
// Publish) or on a new session, not at every change of the others' names - with 10,000
// agents on each of three replicas, every transaction of 128 another replica wrote cost a
// pass over 10,000 names.
func TestPresenceOthersChangesCostNoPass(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := s.Presence("agents", "replica-a", 5*time.Second), s.Presence("agents", "replica-b", 5*time.Second)
	go a.Run(ctx)
	go b.Run(ctx)
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("default/%s-%04d", prefix, i)
		}
		return out
	}
	a.Publish(names("a", 2000))
	wait := func(what string, p *Presence, n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(p.Others()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d names seen, want %d", what, len(p.Others()), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("a's names seen by b", b, 2000)
	before := a.passes.Load()
	for i := range 10 {
		b.Publish(names("b", 300))
		wait(fmt.Sprint("b's names seen by a, ", i), a, 300)
		b.Publish(nil)
		wait(fmt.Sprint("b's names gone, seen by a, ", i), a, 0)
	}
	if n := a.passes.Load() - before; n > 2 {
		t.Errorf("the others' 6,000 changes cost replica a %d passes over its 2,000 names", n)
	}
}

// A name of this replica's deleted by someone else (etcdctl del, a restore) while its
// session lives is written again: the replica took it for written, and the other replicas
// showed its agent gone (Offline) until the agent reconnected.
func TestPresenceOwnKeyDeletedIsWrittenAgain(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := s.Presence("agents", "replica-a", 30*time.Second), s.Presence("agents", "replica-b", 30*time.Second)
	go a.Run(ctx)
	go b.Run(ctx)
	b.Publish([]string{"m/x", "m/y"})
	wait := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(a.Others()) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: a sees %v, want %d names", what, a.Others(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("published", 2)
	dr, err := cl.Delete(ctx, "/kuma-presence/agents/m/x/replica-b")
	if err != nil || dr.Deleted != 1 {
		t.Fatal(dr, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := cl.Get(ctx, "/kuma-presence/agents/m/x/replica-b")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 1 && r.Kvs[0].ModRevision > dr.Header.Revision {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a name deleted by hand is not written again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	wait("written again", 2)
}
