package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Two replicas campaign; one leads and runs the singleton work. The leader is cut off
// without resigning (its client closed, as a SIGKILL would leave it): the other leads within
// the lease TTL, and the work never runs in two places at once.
func TestLeaderFailover(t *testing.T) {
	c := etcdtest.Start(t, 3)
	const ttl = 2 * time.Second
	var running, maxRunning, runs atomic.Int32
	work := func(ctx context.Context) {
		if n := running.Add(1); n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		runs.Add(1)
		<-ctx.Done()
		running.Add(-1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl1, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s1 := NewEtcd(cl1, "/kuma")
	s2 := NewEtcd(c.Client(), "/kuma")
	go s1.RunWhileLeader(ctx, "scheduler", "replica-1", ttl, work)
	if l, err := s2.WaitLeader(ctx, "scheduler"); err != nil || l != "replica-1" {
		t.Fatalf("leader %q %v, want replica-1 (the only candidate)", l, err)
	}
	go s2.RunWhileLeader(ctx, "scheduler", "replica-2", ttl, work)
	time.Sleep(300 * time.Millisecond)
	if l, _ := s2.Leader(ctx, "scheduler"); l != "replica-1" {
		t.Fatalf("leadership moved without a failure: %q", l)
	}
	if ids, err := s2.Candidates(ctx, "scheduler"); err != nil || strings.Join(ids, ",") != "replica-1,replica-2" {
		t.Fatalf("candidates %v %v, want replica-1 (leading) then replica-2", ids, err)
	}
	cl1.Close() // replica-1 cut off: no resign, its lease expires
	start := time.Now()
	deadline := time.Now().Add(ttl + 5*time.Second)
	for {
		if l, _ := s2.Leader(ctx, "scheduler"); l == "replica-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica-2 never became leader")
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("new leader after %v (lease TTL %v)", took, ttl)
	if ids, err := s2.Candidates(ctx, "scheduler"); err != nil || strings.Join(ids, ",") != "replica-2" {
		t.Fatalf("candidates %v %v after replica-1's lease expired, want replica-2", ids, err)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("a new leader after %v, beyond the %v lease", took, ttl)
	}
	deadline = time.Now().Add(5 * time.Second)
	for runs.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if runs.Load() != 2 || maxRunning.Load() != 1 {
		t.Fatalf("the work ran %d times, %d at once; want twice, never together", runs.Load(), maxRunning.Load())
	}
}

// The leader cut off by relays that stop forwarding (its connections stay open, its lease
// renewals go unanswered) while another replica is not: the leader gives up before the
// members expire its lease and elect the other, so the two never lead at once.
func TestLeaderCutOffGivesUpBeforeAnotherLeads(t *testing.T) {
	c := etcdtest.Start(t, 3)
	const ttl = 2 * time.Second
	relays := c.Relays()
	cl1, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.URLs(relays), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl1.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var leading []string // who leads, in the order leaderships began and ended
	var overlap atomic.Bool
	var held atomic.Int32
	lead := func(id string) func(context.Context) {
		return func(lctx context.Context) {
			if held.Add(1) > 1 {
				overlap.Store(true)
			}
			mu.Lock()
			leading = append(leading, "+"+id)
			mu.Unlock()
			<-lctx.Done()
			mu.Lock()
			leading = append(leading, "-"+id)
			mu.Unlock()
			held.Add(-1)
		}
	}
	s1, s2 := NewEtcd(cl1, "/kuma"), NewEtcd(c.Client(), "/kuma")
	go s1.RunWhileLeader(ctx, "scheduler", "replica-1", ttl, lead("replica-1"))
	if l, err := s2.WaitLeader(ctx, "scheduler"); err != nil || l != "replica-1" {
		t.Fatalf("leader %q %v, want replica-1", l, err)
	}
	go s2.RunWhileLeader(ctx, "scheduler", "replica-2", ttl, lead("replica-2"))
	time.Sleep(ttl) // a few renewals: the cut falls anywhere between two
	for _, r := range relays {
		r.Pause()
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		mu.Lock()
		got := strings.Join(leading, " ")
		mu.Unlock()
		if strings.Contains(got, "+replica-2") {
			if overlap.Load() || got != "+replica-1 -replica-1 +replica-2" {
				t.Fatalf("leaderships %q: replica-2 led before replica-1 gave up", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica-2 never led: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
