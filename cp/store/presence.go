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

func (p *Presence) session(ctx context.Context) error {
	sess, err := concurrency.NewSession(p.s.c, concurrency.WithTTL(p.ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() { // the lease revoked: this replica's names go at once
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = p.s.c.Revoke(rctx, sess.Lease())
		cancel()
		sess.Close()
	}()
	pre := p.prefix()
	lctx, cancel := p.s.ctx(ctx)
	r, err := p.s.getRange(lctx, pre, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
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
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := p.s.c.Watch(wctx, pre, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
	held := map[string]int64{} // written on this session, at that revision
	// write compares the names wanted with those written and writes the changes: at the
	// session's start and after a Publish only - the others' changes (a watch answer for
	// each of their transactions) need none, and each pass goes over every name
	write := func() error {
		p.passes.Add(1)
		p.mu.Lock()
		want := maps.Clone(p.want)
		p.mu.Unlock()
		// the changes, maxTxnOps a transaction: thousands of agents connecting at once
		// are a few writes, not one each (one a name took 54 s for 10,000 on three members)
		var ops []clientv3.Op
		var put, del []string
		flush := func() error {
			if len(ops) == 0 {
				return nil
			}
			wc, cancel := p.s.ctx(ctx)
			tr, err := p.s.c.Txn(wc).Then(ops...).Commit()
			cancel()
			if err != nil {
				return err
			}
			for _, n := range put {
				held[n] = tr.Header.Revision
			}
			for _, n := range del {
				delete(held, n)
			}
			ops, put, del = ops[:0], put[:0], del[:0]
			return nil
		}
		for n := range want {
			if held[n] == 0 {
				ops, put = append(ops, clientv3.OpPut(pre+n+"/"+p.id, "", clientv3.WithLease(sess.Lease()))), append(put, n)
				if len(ops) == maxTxnOps {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		for n := range held {
			if !want[n] {
				ops, del = append(ops, clientv3.OpDelete(pre+n+"/"+p.id)), append(del, n)
				if len(ops) == maxTxnOps {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		return flush()
	}
	for pending := true; ; {
		if pending {
			if err := write(); err != nil {
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
			p.mu.Lock()
			for _, ev := range wr.Events {
				name, id, ok := p.split(string(ev.Kv.Key))
				if !ok {
					continue
				}
				if id == p.id {
					// one of this replica's deleted by someone else (etcdctl del, a
					// restore) after it was written: written again
					if ev.Type == clientv3.EventTypeDelete && held[name] != 0 && ev.Kv.ModRevision > held[name] {
						delete(held, name)
						pending = true
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
			p.mu.Unlock()
		}
	}
}
