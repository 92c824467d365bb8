package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Etcd is the Store on etcd v3: one key per resource, prefix/<mesh>/<type>/<name>, holding a
// small JSON envelope (the document and its times); the version is the key's mod revision.
type Etcd struct {
	c      *clientv3.Client
	prefix string
	// Timeout bounds each request, so that a store without quorum answers ErrUnavailable
	// instead of hanging the writer.
	Timeout time.Duration
	// Log, when set, receives a line for each key found holding no resource (unreadable).
	Log        *slog.Logger
	health     atomic.Pointer[Health] // when set, requests are refused at once while it is down
	members    []member               // Client.Store's: each member alone, for Health
	unreadable unreadable
}

// envelope is what a key holds.
type envelope struct {
	Doc      []byte    `json:"doc"`
	Created  time.Time `json:"created"`
	Modified time.Time `json:"modified"`
	// Write is random, a write's own: a write retried after its answer was lost knows its
	// earlier attempt landed by finding its bytes (ours), and two writers putting the same
	// document in the same millisecond put the same bytes without it - the loser, finding
	// the winner's, took the write for its own (an increment counted twice, one lost).
	Write string `json:"write,omitempty"`
}

// newEnvelope is a write's envelope: created and modified now, its own Write.
func newEnvelope(doc []byte, now time.Time) envelope {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return envelope{Doc: doc, Created: now, Modified: now, Write: hex.EncodeToString(b[:])}
}

// NewEtcd is the store under prefix (e.g. "/kuma") on an existing client.
func NewEtcd(c *clientv3.Client, prefix string) *Etcd {
	return &Etcd{c: c, prefix: strings.TrimSuffix(prefix, "/"), Timeout: 5 * time.Second}
}

func (s *Etcd) key(k Key) string { return s.prefix + "/" + k.Mesh + "/" + k.Type + "/" + k.Name }

// keyOf is the resource key of an etcd key under the prefix.
func (s *Etcd) keyOf(key string) (Key, error) {
	parts := strings.SplitN(strings.TrimPrefix(key, s.prefix+"/"), "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.Contains(parts[2], "/") {
		return Key{}, fmt.Errorf("store: key %q is not %s/<mesh>/<type>/<name>", key, s.prefix)
	}
	return Key{parts[0], parts[1], parts[2]}, nil
}

func (s *Etcd) parse(key string, val []byte, rev int64) (Item, error) {
	k, err := s.keyOf(key)
	if err != nil {
		return Item{}, err
	}
	e, err := readEnvelope(val)
	if err != nil {
		return Item{}, fmt.Errorf("store: key %q: %w", key, err)
	}
	return Item{Key: k, Doc: e.Doc, Version: rev, Created: e.Created, Modified: e.Modified}, nil
}

// unavailable turns etcd's "no quorum / no leader / timeout / member gone" into
// ErrUnavailable, and a request over etcd's or gRPC's size limit (a member run with a lower
// --max-request-bytes) into ErrTooLarge.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) || status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%s: %w: %v", op, ErrTooLarge, err)
	}
	if lost(err) || strings.Contains(err.Error(), "context deadline exceeded") {
		return fmt.Errorf("%s: %w (%v)", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (s *Etcd) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.Timeout)
}

// attempts runs op (one request) until it gets an answer, within ctx: an attempt whose
// answer is lost - the member it went to died, the leader changed, or no answer within per
// (a member frozen or cut off: the next attempt goes to another member; a write's per is a
// share of the timeout, as a follower holding a proposal its dead leader never committed
// answers only after etcd's own 5 s) - is made again. Every write is a transaction
// compared on the revisions it read, so running it again is safe: once an earlier attempt
// has landed the comparison fails, and the caller's else branch reads whether it was its
// own (retried says an earlier attempt may have landed). While Health says no quorum is
// reached, no attempt is made: the request is refused at once.
func (s *Etcd) attempts(ctx context.Context, per time.Duration, op func(context.Context) error) (retried bool, err error) {
	for {
		if h := s.health.Load(); h != nil {
			if herr := h.Err(); herr != nil {
				return retried, herr
			}
		}
		actx, cancel := context.WithTimeout(ctx, per)
		err = op(actx)
		cancel()
		if err == nil || !lost(err) || ctx.Err() != nil {
			return retried, err
		}
		retried = true
		select {
		case <-ctx.Done():
			return retried, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Attempt timeouts: a small read or a write (a key, a batch of names) gets a quarter of the
// request's timeout, a read of a whole range of values half of it, at least a second each:
// a frozen member costs one such attempt, the next goes to another.
func (s *Etcd) attemptSmall() time.Duration { return max(s.Timeout/4, time.Second) }
func (s *Etcd) attemptLarge() time.Duration { return max(s.Timeout/2, time.Second) }

// lost says whether a request's answer was lost (it may or may not have been applied).
func lost(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// get reads a key or a bounded range (a linearizable read, made again when its answer is
// lost).
func (s *Etcd) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return s.getAttempts(ctx, s.attemptSmall(), key, opts...)
}

// getRange reads a range of any size (a list of everything), each attempt with the larger
// timeout.
func (s *Etcd) getRange(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return s.getAttempts(ctx, s.attemptLarge(), key, opts...)
}

func (s *Etcd) getAttempts(ctx context.Context, per time.Duration, key string, opts ...clientv3.OpOption) (r *clientv3.GetResponse, err error) {
	_, err = s.attempts(ctx, per, func(ctx context.Context) error {
		r, err = s.c.Get(ctx, key, opts...)
		return err
	})
	return r, err
}

// commit runs a transaction (made again when its answer is lost); retried says an earlier
// attempt may have landed.
func (s *Etcd) commit(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (tr *clientv3.TxnResponse, retried bool, err error) {
	retried, err = s.attempts(ctx, s.attemptSmall(), func(ctx context.Context) error {
		tr, err = s.c.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		return err
	})
	return tr, retried, err
}

// Get implements Store.
func (s *Etcd) Get(ctx context.Context, k Key) (Item, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := s.get(ctx, s.key(k))
	if err != nil {
		return Item{}, unavailable("store: get "+k.String(), err)
	}
	if len(r.Kvs) == 0 {
		return Item{}, fmt.Errorf("store: %s: %w", k, ErrNotFound)
	}
	return s.parse(string(r.Kvs[0].Key), r.Kvs[0].Value, r.Kvs[0].ModRevision)
}

// List implements Store.
func (s *Etcd) List(ctx context.Context, mesh, typ, after string, limit int) ([]Item, string, int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if mesh == "" && typ != "" {
		return s.listType(ctx, typ, after, limit)
	}
	prefix := s.rangePrefix(mesh, typ)
	from := prefix
	if after != "" && s.prefix+"/"+after+"\x00" > prefix {
		// a cursor before the range (any client may send one) starts at its beginning: the
		// range read from it held other meshes' keys
		from = s.prefix + "/" + after + "\x00"
	}
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	read := s.getRange // every key of the range: the larger attempt timeout
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
		if limit <= countBatch {
			read = s.get
		}
	}
	r, err := read(ctx, from, opts...)
	if err != nil {
		return nil, "", 0, unavailable("store: list", err)
	}
	out := make([]Item, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		it, err := s.parse(string(kv.Key), kv.Value, kv.ModRevision)
		if err != nil {
			s.skip(string(kv.Key), kv.ModRevision, err)
			continue
		}
		out = append(out, it)
	}
	next := ""
	if r.More && len(r.Kvs) > 0 { // after the last key read, a resource's or not
		next = strings.TrimPrefix(string(r.Kvs[len(r.Kvs)-1].Key), s.prefix+"/")
	}
	return out, next, r.Header.Revision, nil
}

// rangePrefix is the keys' prefix of a mesh's type (typ "": every type of the mesh; mesh
// "": every resource).
func (s *Etcd) rangePrefix(mesh, typ string) string {
	prefix := s.prefix + "/"
	if mesh != "" {
		prefix += mesh + "/"
		if typ != "" {
			prefix += typ + "/"
		}
	}
	return prefix
}

// Count implements Store: a count-only range read over the list's prefix (etcd counts the
// keys, none is sent), or for one type across every mesh names read in batches (countType).
// A revision compacted away is counted now.
func (s *Etcd) Count(ctx context.Context, mesh, typ string, rev int64) (int, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.count(ctx, mesh, typ, rev)
	if rev > 0 && errors.Is(err, rpctypes.ErrCompacted) {
		n, err = s.count(ctx, mesh, typ, 0)
	}
	if err != nil {
		return 0, unavailable("store: count", err)
	}
	return n, nil
}

func (s *Etcd) count(ctx context.Context, mesh, typ string, rev int64) (int, error) {
	if mesh != "" || typ == "" {
		prefix := s.rangePrefix(mesh, typ)
		r, err := s.get(ctx, prefix, atRev(rev, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithCountOnly())...)
		if err != nil {
			return 0, err
		}
		return int(r.Count), nil
	}
	return s.countType(ctx, s.prefix+"/", typ, rev)
}

// atRev is opts reading at store revision rev (0: now).
func atRev(rev int64, opts ...clientv3.OpOption) []clientv3.OpOption {
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return opts
}

// countBatch is how many names a count of one type of every mesh reads a round trip.
const countBatch = 1000

// countType counts one type of every mesh at rev (0: now, every read at the first one's):
// it reads names only (no value), countBatch at a time, counting those of the type, and the
// batch's last mesh, which may go on past it, with a count-only read of its range of the
// type, the next batch starting after that mesh. A store of many small meshes is a few
// round trips (a count-only read and a one-key probe a mesh were two round trips a mesh, one
// after the other: 4.4 s for 3,000 meshes on three members, over the store's timeout from
// about 3,400), a mesh of many keys is skipped over after countBatch of them.
func (s *Etcd) countType(ctx context.Context, root, typ string, rev int64) (int, error) {
	end := clientv3.GetPrefixRangeEnd(root)
	cursor, total := root, 0
	for {
		r, err := s.get(ctx, cursor, atRev(rev, clientv3.WithRange(end), clientv3.WithLimit(countBatch), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		if len(r.Kvs) == 0 {
			return total, nil
		}
		last := strings.SplitN(strings.TrimPrefix(string(r.Kvs[len(r.Kvs)-1].Key), root), "/", 3)
		lastMesh := "" // counted apart: its keys may go on past this batch
		if r.More && len(last) == 3 {
			lastMesh = last[0]
		}
		for _, kv := range r.Kvs {
			parts := strings.SplitN(strings.TrimPrefix(string(kv.Key), root), "/", 3)
			if len(parts) == 3 && parts[1] == typ && (lastMesh == "" || parts[0] != lastMesh) {
				total++
			}
		}
		switch {
		case !r.More:
			return total, nil
		case lastMesh == "": // a key that is no resource's: on after it
			cursor = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
			continue
		}
		typePrefix := root + lastMesh + "/" + typ + "/"
		c, err := s.get(ctx, typePrefix, atRev(rev, clientv3.WithRange(clientv3.GetPrefixRangeEnd(typePrefix)), clientv3.WithCountOnly())...)
		if err != nil {
			return 0, err
		}
		total += int(c.Count)
		cursor = clientv3.GetPrefixRangeEnd(root + lastMesh + "/")
	}
}

// listType is one type across every mesh (a page of at most limit, or all when limit is 0),
// at one revision: keys are <mesh>/<type>/<name>, so it reads names only (no value), in
// batches growing to countBatch, jumping over a large mesh's other types (to the type's range, or
// past the mesh), and then the values of the type's keys found, a range a mesh, in
// transactions of maxTxnOps ranges. It reads what it returns and the names of the other
// types of small meshes, not every value of the store (the route scheduler lists routers,
// routes and bindings at every pass, beside every dataplane), in a few round trips however
// many meshes there are (two a mesh, one after the other, went over the store's timeout from
// about 3,000 meshes: every such list failed). A page that is full gives a next only when a
// key of the type follows: the last page is never followed by an empty one.
func (s *Etcd) listType(ctx context.Context, typ, after string, limit int) ([]Item, string, int64, error) {
	root := s.prefix + "/"
	end := clientv3.GetPrefixRangeEnd(root)
	cursor := root
	if after != "" {
		cursor = root + after + "\x00"
	}
	var rev int64
	var out []Item
	// names a round trip: from about a page's, doubled at each, up to countBatch - a small
	// page reads little past itself, a list of many meshes is a few round trips
	batch := 16
	if limit > 0 {
		batch = min(limit+1, countBatch)
	}
	for ; ; batch = min(2*batch, countBatch) {
		r, err := s.get(ctx, cursor, atRev(rev, clientv3.WithRange(end), clientv3.WithLimit(int64(batch)), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))...)
		if err != nil {
			return nil, "", 0, unavailable("store: list", err)
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		// the type's keys of this batch, as runs of one mesh (its range of the type: no
		// other key between them)
		var runs [][2]string
		var mesh string
		full, taken := false, 0
		for _, kv := range r.Kvs {
			parts := strings.SplitN(strings.TrimPrefix(string(kv.Key), root), "/", 3)
			if len(parts) != 3 || parts[1] != typ {
				continue
			}
			if limit > 0 && len(out)+taken == limit {
				full = true // a key of the type follows the full page
				break
			}
			taken++
			if len(runs) > 0 && parts[0] == mesh {
				runs[len(runs)-1][1] = string(kv.Key)
				continue
			}
			mesh = parts[0]
			runs = append(runs, [2]string{string(kv.Key), string(kv.Key)})
		}
		items, err := s.readRuns(ctx, runs, rev)
		if err != nil {
			return nil, "", 0, err
		}
		out = append(out, items...)
		switch {
		case full:
			return out, out[len(out)-1].Key.String(), rev, nil
		case !r.More:
			return out, "", rev, nil
		}
		// on after the batch: its last mesh's range of the type, or past that mesh
		last := string(r.Kvs[len(r.Kvs)-1].Key)
		parts := strings.SplitN(strings.TrimPrefix(last, root), "/", 3)
		switch {
		case len(parts) != 3 || parts[1] == typ:
			cursor = last + "\x00"
		case parts[1] < typ:
			cursor = max(last+"\x00", root+parts[0]+"/"+typ+"/")
		default:
			cursor = clientv3.GetPrefixRangeEnd(root + parts[0] + "/")
		}
	}
}

// readRuns reads, at rev, the resources of key ranges [run[0], run[1]] (each of one mesh's
// range of a type), in order, maxTxnOps ranges a transaction.
func (s *Etcd) readRuns(ctx context.Context, runs [][2]string, rev int64) ([]Item, error) {
	var out []Item
	for len(runs) > 0 {
		n := min(len(runs), maxTxnOps)
		ops := make([]clientv3.Op, 0, n)
		for _, run := range runs[:n] {
			ops = append(ops, clientv3.OpGet(run[0], clientv3.WithRange(run[1]+"\x00"), clientv3.WithRev(rev),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)))
		}
		runs = runs[n:]
		var tr *clientv3.TxnResponse
		_, err := s.attempts(ctx, s.attemptLarge(), func(ctx context.Context) (err error) {
			tr, err = s.c.Txn(ctx).Then(ops...).Commit()
			return err
		})
		if err != nil {
			return nil, unavailable("store: list", err)
		}
		for _, resp := range tr.Responses {
			for _, kv := range resp.GetResponseRange().GetKvs() {
				it, err := s.parse(string(kv.Key), kv.Value, kv.ModRevision)
				if err != nil {
					s.skip(string(kv.Key), kv.ModRevision, err)
					continue
				}
				out = append(out, it)
			}
		}
	}
	return out, nil
}

// Put implements Store: read the current version and times, then write only if the key is
// still at that version (etcd's transaction compares its mod revision).
func (s *Etcd) Put(ctx context.Context, k Key, doc []byte, expect int64) (Item, error) {
	for _, p := range []struct{ what, v string }{{"mesh", k.Mesh}, {"type", k.Type}, {"name", k.Name}} {
		if err := ValidKeyPart(p.what, p.v); err != nil {
			return Item{}, fmt.Errorf("store: %w", err)
		}
	}
	if err := checkSize(k, doc); err != nil {
		return Item{}, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	key := s.key(k)
	cur, err := s.get(ctx, key)
	if err != nil {
		return Item{}, unavailable("store: put "+k.String(), err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	env := newEnvelope(doc, now)
	var cmp clientv3.Cmp
	switch {
	case len(cur.Kvs) == 0 && expect > 0:
		return Item{}, fmt.Errorf("store: %s: %w", k, ErrNotFound)
	case len(cur.Kvs) > 0 && expect == 0:
		return Item{}, fmt.Errorf("store: %s: %w", k, ErrExists)
	case len(cur.Kvs) > 0 && expect > 0 && cur.Kvs[0].ModRevision != expect:
		return Item{}, fmt.Errorf("store: %s at version %d, not %d: %w", k, cur.Kvs[0].ModRevision, expect, ErrConflict)
	}
	if len(cur.Kvs) == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	} else {
		var old envelope
		if json.Unmarshal(cur.Kvs[0].Value, &old) == nil && !old.Created.IsZero() {
			env.Created = old.Created
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", cur.Kvs[0].ModRevision)
	}
	val, _ := json.Marshal(env)
	tr, retried, err := s.commit(ctx, []clientv3.Cmp{cmp}, []clientv3.Op{clientv3.OpPut(key, string(val))}, []clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return Item{}, unavailable("store: put "+k.String(), err)
	}
	read := int64(0) // the version compared on (0: none, a create)
	if len(cur.Kvs) > 0 {
		read = cur.Kvs[0].ModRevision
	}
	if !tr.Succeeded && retried {
		if rev, ok := s.ours(ctx, key, read, val); ok {
			// An earlier attempt landed (its answer was lost): this is our write.
			return Item{Key: k, Doc: doc, Version: rev, Created: env.Created, Modified: env.Modified}, nil
		}
	}
	if !tr.Succeeded {
		// Written by someone else between the read and the write.
		return Item{}, conflict(k, tr, expect, read)
	}
	return Item{Key: k, Doc: doc, Version: tr.Header.Revision, Created: env.Created, Modified: env.Modified}, nil
}

// deletedKey is written (empty) by every transaction that deletes a resource: its revision is
// the newest delete's, which no list of the resources can show (a deleted key is gone). It
// is outside the resources' prefix ("/kuma" -> "/kuma-deleted"), so lists and watches of the
// resources never see it.
func (s *Etcd) deletedKey() string { return s.prefix + "-deleted" }

func (s *Etcd) noteDelete() clientv3.Op { return clientv3.OpPut(s.deletedKey(), "") }

// LastDelete is the revision of the newest delete of a resource as the store was at revision
// rev (0: now), 0 when none is known. With the newest version of the resources listed at rev
// it gives the revision of the resources' newest change: the same on every replica that holds
// the same resources, however each came to hold them (a list, or a watch's events).
func (s *Etcd) LastDelete(ctx context.Context, rev int64) (int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	r, err := s.get(ctx, s.deletedKey(), opts...)
	if err != nil {
		return 0, unavailable("store: last delete", err)
	}
	if len(r.Kvs) == 0 {
		return 0, nil
	}
	return r.Kvs[0].ModRevision, nil
}

// Delete implements Store.
func (s *Etcd) Delete(ctx context.Context, k Key, expect int64) error {
	if expect == 0 {
		return fmt.Errorf("store: delete %s: a version or store.Any is needed", k)
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	key := s.key(k)
	cmp := clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	if expect > 0 {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", expect)
	}
	tr, retried, err := s.commit(ctx, []clientv3.Cmp{cmp}, []clientv3.Op{clientv3.OpDelete(key), s.noteDelete()}, []clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return unavailable("store: delete "+k.String(), err)
	}
	if tr.Succeeded || retried && elseKV(tr, 0) == nil {
		return nil // deleted (by an earlier attempt whose answer was lost, when retried)
	}
	if elseKV(tr, 0) == nil {
		return fmt.Errorf("store: %s: %w", k, ErrNotFound)
	}
	return conflict(k, tr, expect, expect)
}

// ours says whether a write of val to key, compared on the key's version `after` (0: on
// its absence, a create), landed: the version that passed that comparison - the key's first
// change after it - holds val. It gives that version's revision.
func (s *Etcd) ours(ctx context.Context, key string, after int64, val []byte) (int64, bool) {
	if after == 0 {
		r, err := s.get(ctx, key)
		if err != nil || len(r.Kvs) == 0 {
			return 0, false
		}
		kv := r.Kvs[0]
		if kv.ModRevision != kv.CreateRevision {
			if r, err = s.get(ctx, key, clientv3.WithRev(kv.CreateRevision)); err != nil || len(r.Kvs) == 0 {
				return 0, false
			}
			kv = r.Kvs[0]
		}
		return kv.ModRevision, string(kv.Value) == string(val)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range s.c.Watch(wctx, key, clientv3.WithRev(after+1)) {
		if wr.Err() != nil {
			return 0, false
		}
		for _, ev := range wr.Events {
			return ev.Kv.ModRevision, ev.Type == clientv3.EventTypePut && string(ev.Kv.Value) == string(val)
		}
	}
	return 0, false
}

// elseKV is the key read by the else branch's i-th operation, nil when it is absent.
func elseKV(tr *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(tr.Responses) {
		return nil
	}
	if rs := tr.Responses[i].GetResponseRange(); rs != nil && len(rs.Kvs) > 0 {
		return rs.Kvs[0]
	}
	return nil
}

// conflict is the error of a write whose comparison failed: expect is the version the write
// was given (0: a create, Any), read the version it read before writing (0: none); the
// version the key holds now is read in the transaction's else branch.
func conflict(k Key, tr *clientv3.TxnResponse, expect, read int64) error {
	var now int64
	if kv := elseKV(tr, 0); kv != nil {
		now = kv.ModRevision
	}
	switch {
	case now == 0 && expect > 0:
		return fmt.Errorf("store: %s was at version %d, deleted meanwhile: %w", k, expect, ErrNotFound)
	case now == 0:
		return fmt.Errorf("store: %s was at version %d, deleted meanwhile: %w", k, read, ErrConflict)
	case expect == 0:
		return fmt.Errorf("store: %s at version %d, created meanwhile: %w", k, now, ErrExists)
	case expect > 0:
		return fmt.Errorf("store: %s at version %d, not %d: %w", k, now, expect, ErrConflict)
	}
	return fmt.Errorf("store: %s at version %d, not %d (written meanwhile): %w", k, now, read, ErrConflict)
}
