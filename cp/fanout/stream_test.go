package fanout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kumadp/kuma-dp/mesh"
)

// A stream that fell behind the changes while its agent was silent (its wake found the log
// compacted past what the stream holds) ends with Unavailable, so that its agent resumes:
// the wake cannot return from the handler, which waits for the agent's next request, so
// the agent is sent an empty response and the stream ends at its ACK.
func TestStreamBehindEndsFromAWake(t *testing.T) {
	cp, addr := startCP(t, servedN(1, 0))
	a := dial(t, addr, "default", nil, mesh.KindDataplane)
	a.ack(a.recv())
	var k *kindSub
	waitUntil(t, "the subscription", func() bool {
		tb := cp.tableFor("default", mesh.KindDataplane)
		tb.mu.RLock()
		defer tb.mu.RUnlock()
		for k = range tb.subs {
		}
		return k != nil
	})
	s := k.s
	waitUntil(t, "the ACK taken", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return k.inflight == ""
	})
	s.mu.Lock() // the stream's wakes wait while the log moves past it
	for gen := range 70_000 {
		cp.Apply(servedN(1, gen+1))
	}
	s.mu.Unlock()
	r := a.recv()
	if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("got %d resources and %d removals, want an empty response", len(r.GetResources()), len(r.GetRemovedResources()))
	}
	a.ack(r)
	select {
	case res := <-a.in:
		if status.Code(res.err) != codes.Unavailable || !strings.Contains(res.err.Error(), "fell too far behind") {
			t.Fatalf("after the ACK: %v, want Unavailable: fell too far behind", res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10 s of the ACK")
	}
}
