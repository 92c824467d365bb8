package store

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

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
	doneA := make(chan struct{})
	go func() { defer close(doneA); a.Run(ctxA) }()
	go b.Run(ctxB)
	a.Publish([]string{"m/a", "m/b"})
	b.Publish([]string{"m/b"})
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
