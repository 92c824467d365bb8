package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultLeaseTTL is how long a leader that stops renewing (killed, cut off) stays leader:
// another replica leads within it.
const DefaultLeaseTTL = 5 * time.Second

// RunWhileLeader makes this replica (id) a candidate for the leadership called name, and
// runs fn whenever it leads: fn's context is cancelled as soon as leadership may be lost -
// the session's lease not renewed for two thirds of its TTL (etcd unreachable, cut off, or
// this replica paused), a third of the TTL before the members could expire it and elect
// another: no two replicas lead at once, and none says it leads without a live lease. Work
// that must happen once in the cluster (a scheduler) runs in fn. It returns when ctx ends.
// Leadership is etcd's concurrency.Election on a session lease; nothing here decides it.
func (s *Etcd) RunWhileLeader(ctx context.Context, name, id string, ttl time.Duration, fn func(context.Context)) error {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	secs := max(int(ttl/time.Second), 1)
	for ctx.Err() == nil {
		if err := s.leadOnce(ctx, name, id, secs, fn); err != nil && ctx.Err() == nil {
			select { // etcd unreachable: try again shortly
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// electionKey is outside the resources' prefix, so lists and watches never see it.
func (s *Etcd) electionKey(name string) string { return s.prefix + "-leader/" + name }

func (s *Etcd) leadOnce(ctx context.Context, name, id string, ttl int, fn func(context.Context)) error {
	sess, err := concurrency.NewSession(s.c, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, s.electionKey(name))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a session lost while campaigning ends the campaign
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := e.Campaign(cctx, id); err != nil {
		return err
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	renewals, err := s.c.KeepAlive(lctx, sess.Lease()) // the session's renewals, seen here too
	if err != nil {
		return err
	}
	go func() {
		whileRenewed(lctx, sess.Done(), renewals, time.Duration(ttl)*time.Second)
		stop()
	}()
	fn(lctx)
	stop()
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	defer rcancel()
	_ = e.Resign(rctx)
	return nil
}

// whileRenewed returns when the lease whose renewals arrive on renewals was last renewed
// two thirds of ttl ago, when the session ends, or when ctx does. A lease is renewed every
// third of its TTL: two renewals went unanswered.
func whileRenewed(ctx context.Context, sessDone <-chan struct{}, renewals <-chan *clientv3.LeaseKeepAliveResponse, ttl time.Duration) {
	last := time.Now() // the campaign was just won on the lease
	tick := time.NewTicker(max(ttl/20, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sessDone:
			return
		case _, ok := <-renewals:
			if !ok {
				return
			}
			last = time.Now()
		case <-tick.C:
			if time.Since(last) > ttl*2/3 {
				return
			}
		}
	}
}

// Leader is the id of the current leader of name, or "" when there is none.
func (s *Etcd) Leader(ctx context.Context, name string) (string, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	// the election's keys (concurrency.Election's: name + "/" + lease), not another name's
	r, err := s.get(ctx, s.electionKey(name)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", unavailable("store: leader of "+name, err)
	}
	if len(r.Kvs) == 0 {
		return "", nil
	}
	return string(r.Kvs[0].Value), nil
}

// Candidates are the ids of every replica campaigning for name now (alive: each on its
// session's lease), the leader first, then in the order they would lead.
func (s *Etcd) Candidates(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := s.get(ctx, s.electionKey(name), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, unavailable("store: candidates of "+name, err)
	}
	out := make([]string, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		out = append(out, string(kv.Value))
	}
	return out, nil
}

var errNoLeader = errors.New("no leader")

// WaitLeader waits until name has a leader and returns it.
func (s *Etcd) WaitLeader(ctx context.Context, name string) (string, error) {
	for {
		l, err := s.Leader(ctx, name)
		if err == nil && l != "" {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("store: leader of %s: %w (%v)", name, errNoLeader, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
