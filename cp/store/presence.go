package store

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Presence shares between replicas which names each holds (the dataplanes whose agents
// hold a stream to it: kuma-cp's group "agents", which the routers' readiness reads too): a
// name held is a key <prefix>-presence/<group>/<name>/<id> on the
// replica's session lease, so the names of a replica that stops go at once, and those of one
// killed or cut off within the lease's TTL. Every replica follows the others' keys.
type Presence struct {
	s         *Etcd
	group, id string
	ttl       int
	mu        sync.Mutex
	want      map[string]bool
	others    map[string]map[string]bool // name -> the other replicas holding it
	kick      chan struct{}
	passes    atomic.Int64 // comparisons of want with what is written
	listed    atomic.Bool  // the others' names were read once
}

// Presence is the presence of replica id among those of group, on a session lease of ttl
// (DefaultLeaseTTL when 0). Run it, then Publish and ask Elsewhere.
func (s *Etcd) Presence(group, id string, ttl time.Duration) *Presence {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return &Presence{s: s, group: group, id: strings.ReplaceAll(id, "/", "_"), ttl: max(int(ttl/time.Second), 1),
		want: map[string]bool{}, others: map[string]map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Publish sets the names this replica holds (the latest call wins; Run writes them).
func (p *Presence) Publish(names []string) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	p.mu.Lock()
	same := maps.Equal(want, p.want)
	p.want = want
	p.mu.Unlock()
	if !same {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Elsewhere says whether another replica holds name.
func (p *Presence) Elsewhere(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.others[name]) > 0
}

// Listed reports whether the others' names have been read once: before, Elsewhere says
// false of every name.
func (p *Presence) Listed() bool { return p.listed.Load() }

// Others are the names the other replicas hold, each with those replicas (sorted).
func (p *Presence) Others() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]string, len(p.others))
	for name, ids := range p.others {
		out[name] = slices.Sorted(maps.Keys(ids))
	}
	return out
}

// Run keeps this replica's names in etcd and follows the others' until ctx ends; its names
// are removed when it returns.
func (p *Presence) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := p.session(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// maxTxnOps is the most operations a presence transaction holds.
const maxTxnOps = MaxTxnOps

var errPresenceLost = errors.New("presence: session or watch lost")

func (p *Presence) prefix() string { return p.s.prefix + "-presence/" + p.group + "/" }

// split is a key's name and replica.
func (p *Presence) split(key string) (name, id string, ok bool) {
	rest := strings.TrimPrefix(key, p.prefix())
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// session holds this replica's names on one lease: it lists the others' names, then writes
// its own at the start and after each Publish, and follows the others' on a watch, until ctx
// ends or the lease or the watch is lost (errPresenceLost: Run starts another).
func (p *Presence) session(ctx context.Context) error {
	sess, err := concurrency.NewSession(p.s.c, concurrency.WithTTL(p.ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer p.revoke(ctx, sess)
	rev, err := p.listOthers(ctx)
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := p.s.c.Watch(wctx, p.prefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	w := &presenceWriter{p: p, lease: sess.Lease(), held: map[string]int64{}}
	for pending := true; ; {
		if pending {
			if err := w.write(ctx); err != nil {
				return err
			}
			pending = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errPresenceLost
		case <-p.kick:
			pending = true
		case wr, ok := <-events:
			if !ok || wr.Err() != nil || wr.CompactRevision != 0 {
				return errPresenceLost // list again
			}
			pending = w.follow(wr.Events)
		}
	}
}

// revoke ends the session with its lease revoked: this replica's names go at once.
func (p *Presence) revoke(ctx context.Context, sess *concurrency.Session) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_, _ = p.s.c.Revoke(rctx, sess.Lease())
	cancel()
	sess.Close()
}

// listOthers reads the other replicas' names (Elsewhere answers from them from now on) and
// returns the revision read at.
func (p *Presence) listOthers(ctx context.Context) (int64, error) {
	lctx, cancel := p.s.ctx(ctx)
	r, err := p.s.getRange(lctx, p.prefix(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, err
	}
	others := map[string]map[string]bool{}
	for _, kv := range r.Kvs {
		if name, id, ok := p.split(string(kv.Key)); ok && id != p.id {
			if others[name] == nil {
				others[name] = map[string]bool{}
			}
			others[name][id] = true
		}
	}
	p.mu.Lock()
	p.others = others
	p.mu.Unlock()
	p.listed.Store(true)
	return r.Header.Revision, nil
}

// presenceWriter writes a replica's names on its session's lease and knows those written
// (held, at the revision of each).
type presenceWriter struct {
	p     *Presence
	lease clientv3.LeaseID
	held  map[string]int64
	// the changes not yet written: maxTxnOps a transaction
	ops      []clientv3.Op
	put, del []string
}

// write compares the names wanted with those written and writes the changes: at the
// session's start and after a Publish only - the others' changes (a watch answer for each
// of their transactions) need none, and each pass goes over every name. The changes go
// maxTxnOps a transaction: thousands of agents connecting at once are a few writes, not one
// each (one a name took 54 s for 10,000 on three members).
func (w *presenceWriter) write(ctx context.Context) error {
	w.p.passes.Add(1)
	w.p.mu.Lock()
	want := maps.Clone(w.p.want)
	w.p.mu.Unlock()
	pre := w.p.prefix()
	for n := range want {
		if w.held[n] == 0 {
			w.ops, w.put = append(w.ops, clientv3.OpPut(pre+n+"/"+w.p.id, "", clientv3.WithLease(w.lease))), append(w.put, n)
			if err := w.flushFull(ctx); err != nil {
				return err
			}
		}
	}
	for n := range w.held {
		if !want[n] {
			w.ops, w.del = append(w.ops, clientv3.OpDelete(pre+n+"/"+w.p.id)), append(w.del, n)
			if err := w.flushFull(ctx); err != nil {
				return err
			}
		}
	}
	return w.flush(ctx)
}

// flushFull writes the changes once they fill a transaction.
func (w *presenceWriter) flushFull(ctx context.Context) error {
	if len(w.ops) < maxTxnOps {
		return nil
	}
	return w.flush(ctx)
}

// flush writes the changes gathered in one transaction and notes them in held.
func (w *presenceWriter) flush(ctx context.Context) error {
	if len(w.ops) == 0 {
		return nil
	}
	wc, cancel := w.p.s.ctx(ctx)
	tr, err := w.p.s.c.Txn(wc).Then(w.ops...).Commit()
	cancel()
	if err != nil {
		return err
	}
	for _, n := range w.put {
		w.held[n] = tr.Header.Revision
	}
	for _, n := range w.del {
		delete(w.held, n)
	}
	w.ops, w.put, w.del = w.ops[:0], w.put[:0], w.del[:0]
	return nil
}

// follow applies a watch answer: the others' names to Elsewhere's; true when one of this
// replica's was deleted by someone else and must be written again.
func (w *presenceWriter) follow(events []*clientv3.Event) (rewrite bool) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		name, id, ok := p.split(string(ev.Kv.Key))
		if !ok {
			continue
		}
		if id == p.id {
			// one of this replica's deleted by someone else (etcdctl del, a restore)
			// after it was written: written again
			if ev.Type == clientv3.EventTypeDelete && w.held[name] != 0 && ev.Kv.ModRevision > w.held[name] {
				delete(w.held, name)
				rewrite = true
			}
			continue
		}
		if ev.Type == clientv3.EventTypeDelete {
			delete(p.others[name], id)
			if len(p.others[name]) == 0 {
				delete(p.others, name)
			}
			continue
		}
		if p.others[name] == nil {
			p.others[name] = map[string]bool{}
		}
		p.others[name][id] = true
	}
	return rewrite
}
