package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Health follows whether this replica reaches a quorum of etcd: a linearizable read (it
// needs a leader, and the leader a quorum) every probe interval, each with that interval as
// its timeout. When none has been answered for the grace, the store is down: Err says why,
// every request of the store is refused at once with ErrUnavailable (a write without quorum
// never waits for its timeout) and one line is logged; the first answer after it ends the
// outage, with one more line. A watch that hears nothing cannot tell "nothing changed" from
// "cut off"; the probe can.
//
// With a Client's store (Client.Store), each member is probed alone (the read through the
// quorum, answered by it: it reaches the leader, the leader a quorum; one answer is enough):
// requests go to the members that answer, and a member
// frozen, cut off or out of the quorum is left out after two probes unanswered - a request
// sent to it is made again on another after its attempt's timeout, never waits for the
// whole (the client's round robin went on sending a third of all requests to a frozen
// member). It is back at its first answer.
//
// For a lease TTL the probe interval is TTL/5 and the grace TTL/2 (at least 200 ms and
// 500 ms): an outage is known within 0.7 TTL, before any lease of this replica - its
// leadership, its presence - expires on the members.
type Health struct {
	s            *Etcd
	every, grace time.Duration
	log          *slog.Logger

	mu     sync.Mutex
	lastOK time.Time // the last probe answered (or the start)
	down   error     // the outage's error while down, nil while up
	since  time.Time // when the outage began

	missed []int // probes each member left unanswered in a row (Run's goroutine only)
	left   []bool
}

// Health is the quorum health of s for a lease TTL of ttl (DefaultLeaseTTL when 0); from
// now on the store's requests are refused while it is down. Run it.
func (s *Etcd) Health(ttl time.Duration, log *slog.Logger) *Health {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	h := &Health{s: s, every: max(ttl/5, 200*time.Millisecond), grace: max(ttl/2, 500*time.Millisecond), log: log, lastOK: time.Now()}
	s.health.Store(h)
	return h
}

// Err is nil while a quorum is reached; else why not (ErrUnavailable).
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// Run probes until ctx ends.
func (h *Health) Run(ctx context.Context) {
	h.missed, h.left = make([]int, len(h.s.members)), make([]bool, len(h.s.members))
	for ctx.Err() == nil {
		start := time.Now()
		answered, err := h.probe(ctx)
		if ctx.Err() != nil {
			return
		}
		h.observe(err, time.Now())
		h.steer(answered)
		select {
		case <-ctx.Done():
		case <-time.After(h.every - time.Since(start)):
		}
	}
}

// probe reads through the quorum from each member alone, all at once, within the probe
// interval: answered says which members answered, err is nil when any did. A linearizable
// read answered by a member needs that member to reach the leader, and the leader a quorum,
// so one answer is proof enough; asked through the client's balancer instead, the read went
// to a frozen member in turn with the others, and two or three such probes in a row (one
// start in a few dozen, more under load) declared an outage while two members answered.
// Without the members' own clients (a store made by NewEtcd) the one read goes through the
// balancer.
func (h *Health) probe(ctx context.Context) (answered []bool, err error) {
	pctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), h.every)
	defer cancel()
	if len(h.s.members) == 0 {
		_, err = h.s.c.Get(pctx, h.s.prefix, clientv3.WithCountOnly())
		return nil, err
	}
	var wg sync.WaitGroup
	answered = make([]bool, len(h.s.members))
	errs := make([]error, len(h.s.members))
	for i, m := range h.s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.c.Get(pctx, h.s.prefix, clientv3.WithCountOnly())
			answered[i] = errs[i] == nil
		}()
	}
	wg.Wait()
	if slices.Contains(answered, true) {
		return answered, nil
	}
	return answered, errs[0]
}

// steer keeps the client's requests on the members that answer: one is left out after two
// probes unanswered in a row, back at its first answer; when none would be left, all are
// kept (the client tries each).
func (h *Health) steer(answered []bool) {
	left := make([]bool, len(answered))
	var eps []string
	for i, ok := range answered {
		if ok {
			h.missed[i] = 0
		} else {
			h.missed[i]++
		}
		left[i] = h.missed[i] >= 2
		if !left[i] {
			eps = append(eps, h.s.members[i].endpoint)
		}
	}
	if len(eps) == 0 {
		left = make([]bool, len(answered))
		for _, m := range h.s.members {
			eps = append(eps, m.endpoint)
		}
	}
	if slices.Equal(left, h.left) {
		return
	}
	h.left = left
	h.s.c.SetEndpoints(eps...)
	var out []string
	for i, l := range left {
		if l {
			out = append(out, h.s.members[i].endpoint)
		}
	}
	h.log.Info("etcd members answering changed: requests go to the members answering", "answering", eps, "left_out", out)
}

// observe records a probe's outcome at now.
func (h *Health) observe(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.lastOK = now
		if h.down != nil {
			h.down = nil
			h.log.Info("etcd quorum reached again: the store is followed and written again", "outage", now.Sub(h.since).Round(time.Millisecond).String())
		}
		return
	}
	if h.down == nil && now.Sub(h.lastOK) > h.grace {
		h.since = h.lastOK
		h.down = fmt.Errorf("%w: no quorum of etcd reached since %s (%v)", ErrUnavailable, h.lastOK.UTC().Format(time.RFC3339), err)
		h.log.Warn("etcd quorum lost: agents are served the last resources read, writes are refused, this replica does not lead", "error", h.down)
	}
}
