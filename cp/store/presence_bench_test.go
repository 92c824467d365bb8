package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// BenchmarkPresencePublish10k: a replica publishes the names of 10,000 agents (a replica
// starting with its agents) on a three-member etcd, until another replica sees them all;
// then they leave, until the other sees none. docs/control-plane.md cites it:
//
//	go test -run '^$' -bench PresencePublish10k -benchtime 3x ./cp/store
func BenchmarkPresencePublish10k(b *testing.B) {
	c := etcdtest.Start(b, 3)
	s := NewEtcd(c.Client(), "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pa, pb := s.Presence("agents", "replica-a", 5*time.Second), s.Presence("agents", "replica-b", 5*time.Second)
	go pa.Run(ctx)
	go pb.Run(ctx)
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("default/dp-%05d", i)
	}
	wait := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for len(pb.Others()) != n {
			if time.Now().After(deadline) {
				b.Fatalf("%d names seen by the other replica, want %d", len(pb.Others()), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var seen, gone time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		pa.Publish(names)
		wait(len(names))
		seen += time.Since(start)
		start = time.Now()
		pa.Publish(nil)
		wait(0)
		gone += time.Since(start)
	}
	b.ReportMetric(seen.Seconds()/float64(b.N), "s-to-seen")
	b.ReportMetric(gone.Seconds()/float64(b.N), "s-to-gone")
}
