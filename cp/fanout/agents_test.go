package fanout

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

type recorder struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *recorder) Publish(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, names)
}

func (r *recorder) last() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil, 0
	}
	return r.calls[len(r.calls)-1], len(r.calls)
}

// The agents holding a stream are named (mesh/name) and shared: published at once, again
// when one comes or goes, and not while nothing changes.
func TestAgentsNamedAndShared(t *testing.T) {
	cp, addr := startCP(t, servedN(1, 1))
	var pub recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cp.ShareAgents(ctx, &pub, 10*time.Millisecond)
	wait := func(what string, want []string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _ := pub.last()
			if slices.Equal(cp.AgentNames(), want) && slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: AgentNames %v, published %v; want %v", what, cp.AgentNames(), got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("no agent", []string{})
	a := dial(t, addr, "shop", nil, mesh.KindVirtualOutbound)
	a.recv()
	wait("one agent", []string{"shop/agent"})
	_, n := pub.last()
	time.Sleep(100 * time.Millisecond)
	if _, again := pub.last(); again != n {
		t.Errorf("published %d times more while nothing changed", again-n)
	}
	if err := a.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	wait("the agent gone", []string{})
}
