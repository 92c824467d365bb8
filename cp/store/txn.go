package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Write is one write of a transaction: a Put of Doc (Delete false) or a Delete, each
// conditional on Expect as in Store.Put and Store.Delete; or, with Check, only the
// condition: the transaction holds only while Key is still at version Expect (0: absent),
// and nothing is written to it - a write decided from what was read of other keys names
// them so, and never lands once they changed.
type Write struct {
	Key    Key
	Doc    []byte
	Expect int64
	Delete bool
	Check  bool
	// Created, when set on an update, is the creation time kept (as read with the version
	// expected), sparing a read.
	Created time.Time
}

// Limits of one transaction a writer batching many writes keeps within: MaxTxnOps
// comparisons, and as many operations (etcd's default --max-txn-ops), and MaxTxnBytes of
// documents, which the envelope's base64 makes 4/3 larger, under etcd's default
// --max-request-bytes (1.5 MiB).
const (
	MaxTxnOps   = 128
	MaxTxnBytes = 1 << 20
)

// Transactional is a Store that writes several resources at once: all or none.
type Transactional interface {
	Store
	// Txn applies every write, or none when one's Expect does not hold (ErrConflict; the
	// message names the first such key).
	Txn(ctx context.Context, writes ...Write) error
}

var _ Transactional = (*Etcd)(nil)

// Txn implements Transactional with one etcd transaction.
func (s *Etcd) Txn(ctx context.Context, writes ...Write) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var t txn
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, w := range writes {
		if err := s.addWrite(ctx, &t, w, now); err != nil {
			return err
		}
	}
	if len(t.puts) < len(t.names) { // a delete among them
		t.ops = append(t.ops, s.noteDelete())
	}
	tr, retried, err := s.commit(ctx, t.cmps, t.ops, nil)
	if err != nil {
		return unavailable("store: txn "+strings.Join(t.names, ", "), err)
	}
	if !tr.Succeeded && retried && len(t.puts) > 0 && t.puts[0].w.Expect >= 0 {
		// An earlier attempt may have landed (its answer was lost): it did when its first
		// put is the version that passed its comparison (all or none of it is there).
		first := t.puts[0]
		if _, ok := s.ours(ctx, s.key(first.w.Key), first.w.Expect, first.val); ok {
			return nil
		}
	}
	if !tr.Succeeded {
		return fmt.Errorf("store: txn %s: %w", strings.Join(t.names, ", "), ErrConflict)
	}
	return nil
}

// txn is a transaction being made: its comparisons and operations, the keys it writes (for
// errors) and its puts with the values written.
type txn struct {
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	names []string
	puts  []written
}

// written is a put of a transaction and the value it writes.
type written struct {
	w   Write
	val []byte
}

// addWrite checks a write and adds its comparison and its operation (none for a Check) to t.
func (s *Etcd) addWrite(ctx context.Context, t *txn, w Write, now time.Time) error {
	for _, p := range []struct{ what, v string }{{"mesh", w.Key.Mesh}, {"type", w.Key.Type}, {"name", w.Key.Name}} {
		if err := ValidKeyPart(p.what, p.v); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}
	if w.Check {
		if w.Expect < 0 {
			return fmt.Errorf("store: check %s: a version or 0 (absent) is needed", w.Key)
		}
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(s.key(w.Key)), "=", w.Expect))
		return nil
	}
	if !w.Delete {
		if err := checkSize(w.Key, w.Doc); err != nil {
			return err
		}
	}
	key := s.key(w.Key)
	t.names = append(t.names, w.Key.String())
	switch {
	case w.Expect == 0:
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
	case w.Expect > 0:
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", w.Expect))
	case w.Delete:
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.CreateRevision(key), ">", 0))
	}
	if w.Delete {
		if w.Expect == 0 {
			return fmt.Errorf("store: delete %s: a version or store.Any is needed", w.Key)
		}
		t.ops = append(t.ops, clientv3.OpDelete(key))
		return nil
	}
	env, err := s.txnEnvelope(ctx, w, key, now)
	if err != nil {
		return err
	}
	val, _ := json.Marshal(env)
	t.ops = append(t.ops, clientv3.OpPut(key, string(val)))
	t.puts = append(t.puts, written{w, val})
	return nil
}

// txnEnvelope is the envelope a put writes: an update keeps the creation time (as given
// with the write, else as read).
func (s *Etcd) txnEnvelope(ctx context.Context, w Write, key string, now time.Time) (envelope, error) {
	env := newEnvelope(w.Doc, now)
	if w.Expect > 0 && !w.Created.IsZero() {
		env.Created = w.Created
	} else if w.Expect != 0 {
		cur, err := s.get(ctx, key)
		if err != nil {
			return env, unavailable("store: txn "+w.Key.String(), err)
		}
		var old envelope
		if len(cur.Kvs) > 0 && json.Unmarshal(cur.Kvs[0].Value, &old) == nil && !old.Created.IsZero() {
			env.Created = old.Created
		}
	}
	return env, nil
}
