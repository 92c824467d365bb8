package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

var k1 = Key{"default", "VirtualOutbound", "by-version"}

// conflictText is what every conflict says: the resource, its version and the one given.
var conflictText = regexp.MustCompile(`default/VirtualOutbound/by-version at version \d+, not \d+`)

func TestPutGetListDelete(t *testing.T) {
	c := etcdtest.Start(t, 3)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	created, err := s.Put(ctx, k1, []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, k1, []byte("again"), 0); !errors.Is(err, ErrExists) {
		t.Fatalf("create over an existing one: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	updated, err := s.Put(ctx, k1, []byte("v2"), created.Version)
	if err != nil {
		t.Fatal(err)
	}
	if !updated.Created.Equal(created.Created) || !updated.Modified.After(created.Modified) || updated.Version <= created.Version {
		t.Fatalf("times/version: created %+v updated %+v", created, updated)
	}
	if _, err := s.Put(ctx, k1, []byte("stale"), created.Version); !errors.Is(err, ErrConflict) {
		t.Fatalf("a stale write: %v", err)
	}
	got, err := s.Get(ctx, k1)
	if err != nil || string(got.Doc) != "v2" || got.Version != updated.Version || !got.Created.Equal(created.Created) {
		t.Fatalf("get: %+v %v", got, err)
	}
	for i := range 5 {
		if _, err := s.Put(ctx, Key{"default", "Dataplane", fmt.Sprintf("dp-%d", i)}, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, Key{"other", "Dataplane", "x"}, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	// paging through one mesh's dataplanes, two at a time
	var names []string
	after := ""
	for {
		items, next, _, err := s.List(ctx, "default", "Dataplane", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			names = append(names, it.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if fmt.Sprint(names) != "[dp-0 dp-1 dp-2 dp-3 dp-4]" {
		t.Fatalf("paged list: %v", names)
	}
	if all, _, _, _ := s.List(ctx, "", "Dataplane", "", 0); len(all) != 6 {
		t.Fatalf("every mesh's dataplanes: %d", len(all))
	}
	// A stale write or delete names the resource, the version it holds and the one given.
	want := fmt.Sprintf("%s at version %d, not %d", k1, updated.Version, created.Version)
	if _, err := s.Put(ctx, k1, []byte("stale"), created.Version); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a stale write: %v, want %q in it", err, want)
	}
	if err := s.Delete(ctx, k1, created.Version); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a stale delete: %v, want %q in it", err, want)
	}
	if err := s.Delete(ctx, k1, updated.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, k1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.Delete(ctx, k1, Any); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting what is gone: %v", err)
	}
}

// 50 writers increment one counter with compare-and-set: each write lands or gets
// ErrConflict, and the counter equals the writes that landed: no lost update.
func TestConcurrentWritersNoLostUpdate(t *testing.T) {
	c := etcdtest.Start(t, 3)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	if _, err := s.Put(ctx, k1, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	var landed, conflicts atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := s.Get(ctx, k1)
			if err != nil {
				t.Error(err)
				return
			}
			n, _ := strconv.Atoi(string(it.Doc))
			switch _, err := s.Put(ctx, k1, []byte(strconv.Itoa(n+1)), it.Version); {
			case err == nil:
				landed.Add(1)
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
				if !conflictText.MatchString(err.Error()) {
					t.Errorf("a conflict that does not name the versions: %v", err)
				}
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	it, _ := s.Get(ctx, k1)
	if got := string(it.Doc); got != strconv.FormatInt(landed.Load(), 10) || landed.Load()+conflicts.Load() != 50 || landed.Load() == 0 {
		t.Fatalf("counter %s after %d landed and %d conflicts: an update was lost", got, landed.Load(), conflicts.Load())
	}
}

func collect(t *testing.T, ch <-chan Event, n int) []Event {
	t.Helper()
	var out []Event
	for len(out) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d events: %+v", len(out), out)
			}
			out = append(out, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d events of %d after 10s: %+v", len(out), n, out)
		}
	}
	return out
}

// A watch resumed from the last revision seen delivers exactly what it missed, in order;
// a watch from a compacted revision says to re-list.
func TestWatchResumesAndRelists(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	_, _, rev, err := s.List(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctx, rev)
	a, _ := s.Put(ctx, Key{"m", "T", "a"}, []byte("1"), 0)
	evs := collect(t, ch, 1)
	if evs[0].Type != Put || evs[0].Item.Name != "a" || evs[0].Revision != a.Version {
		t.Fatalf("first event %+v", evs[0])
	}
	cancel() // the replica stops watching; changes happen meanwhile
	b, _ := s.Put(context.Background(), Key{"m", "T", "b"}, []byte("2"), 0)
	if err := s.Delete(context.Background(), Key{"m", "T", "a"}, Any); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	evs = collect(t, s.Watch(ctx2, a.Version), 2)
	if evs[0].Type != Put || evs[0].Item.Name != "b" || evs[0].Revision != b.Version || evs[1].Type != Delete || evs[1].Item.Name != "a" {
		t.Fatalf("resumed events %+v", evs)
	}
	c.Compact(context.Background(), cl)
	evs = collect(t, s.Watch(ctx2, a.Version), 1)
	if evs[0].Type != Relist {
		t.Fatalf("a watch from a compacted revision: %+v, want Relist", evs[0])
	}
}

// One member killed: writes and watches go on. Two killed (no quorum): writes fail at once
// with ErrUnavailable, never hang. Members back: writes work again and the watch, which
// never stopped, delivers what was written, nothing missed, nothing twice.
func TestQuorumLossAndRecovery(t *testing.T) {
	c := etcdtest.Start(t, 3)
	s := NewEtcd(c.Client(), "/kuma")
	s.Timeout = 2 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, rev, _ := s.List(ctx, "", "", "", 0)
	ch := s.Watch(ctx, rev)
	c.Kill(0)
	if _, err := s.Put(ctx, Key{"m", "T", "one-down"}, []byte("x"), 0); err != nil {
		t.Fatalf("a write with one member down: %v", err)
	}
	collect(t, ch, 1)
	c.Kill(1)
	start := time.Now()
	_, err := s.Put(ctx, Key{"m", "T", "no-quorum"}, []byte("x"), 0)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a write without quorum: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a write without quorum took %v", took)
	}
	c.Restart(0)
	c.Restart(1)
	var it Item
	deadline := time.Now().Add(15 * time.Second)
	for {
		if it, err = s.Put(ctx, Key{"m", "T", "back"}, []byte("x"), 0); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("writes after the members came back: %v", err)
	}
	evs := collect(t, ch, 1)
	if evs[0].Item.Name != "back" || evs[0].Revision != it.Version {
		t.Fatalf("after recovery the watch gave %+v, want the write %q once", evs, "back")
	}
	select {
	case e := <-ch:
		t.Fatalf("an extra event: %+v", e)
	case <-time.After(300 * time.Millisecond):
	}
}

// A write retried after its answer was lost asks whether its earlier attempt landed. Another
// writer that put the same document in the same millisecond, under the same comparison,
// wrote the same bytes: the loser took the winner's write for its own, and an increment
// was counted twice (TestLeaderKilledMidWrite: "counter 167 after 168 increments
// succeeded"). Each write's envelope is its own.
func TestRetriedWriteKnowsAnotherWritersSameBytes(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx := context.Background()
	read, err := s.Put(ctx, k1, []byte("5"), 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	winner, _ := json.Marshal(newEnvelope([]byte("6"), now))
	loser, _ := json.Marshal(newEnvelope([]byte("6"), now))
	if _, err := cl.Put(ctx, s.key(k1), string(winner)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.ours(ctx, s.key(k1), read.Version, loser); ok {
		t.Fatal("the loser of two same-document writes took the winner's for its own")
	}
	if _, ok := s.ours(ctx, s.key(k1), read.Version, winner); !ok {
		t.Fatal("the winner does not know its own write")
	}
}

// etcd's leader SIGKILLed, then the next one, while 4 writers create resources and
// increment a counter with compare-and-set: with three of five members up, every write
// lands exactly once - one whose answer was lost with the member is run again under its
// own comparison (it used to fail with gRPC's "Unavailable ... connection reset", a 500,
// though it had sometimes landed) - the counter equals the increments that succeeded, and
// the watch delivers each resource once.
func TestLeaderKilledMidWrite(t *testing.T) {
	// Five members, none restarted: a restarted member needs its old port back, which
	// another test may hold meanwhile (TestQuorumLossAndRecovery restarts members).
	c := etcdtest.Start(t, 5)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := Key{"m", "T", "counter"}
	if _, err := s.Put(ctx, counter, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	_, _, rev, _ := s.List(ctx, "", "", "", 0)
	events := s.Watch(ctx, rev)
	var mu sync.Mutex
	landed := map[string]bool{}
	var failures []error
	increments := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				_, err := s.Put(ctx, Key{"m", "T", name}, []byte("x"), 0)
				mu.Lock()
				if err == nil {
					landed[name] = true
				} else {
					failures = append(failures, err)
				}
				mu.Unlock()
				it, err := s.Get(ctx, counter)
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					continue
				}
				n, _ := strconv.Atoi(string(it.Doc))
				_, err = s.Put(ctx, counter, []byte(strconv.Itoa(n+1)), it.Version)
				mu.Lock()
				if err == nil {
					increments++
				} else if !errors.Is(err, ErrConflict) {
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		}()
	}
	leader := func() int { // the member leading now (one is elected within a second)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for i, m := range c.Members {
				sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
				st, err := cl.Status(sctx, m.ClientURL)
				scancel()
				if err == nil && st.Leader == st.Header.MemberId {
					return i
				}
			}
		}
		t.Fatal("no leader")
		return -1
	}
	for range 2 {
		time.Sleep(500 * time.Millisecond)
		c.Kill(leader())
	}
	time.Sleep(500 * time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	items, _, _, err := s.List(ctx, "m", "T", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range failures {
		t.Errorf("a write failed with two of three members up: %v", err)
	}
	seen := map[string]int{}
	// Eventually, whatever the machine's load: a watch whose member was killed resumes on
	// another one (etcd's client, then Watch's restart after the last revision delivered),
	// and under other suites' load that took over 10 s once (49 of 195 delivered by then).
	deadline := time.After(45 * time.Second)
	for len(seen) < len(items) {
		select {
		case e := <-events:
			if e.Type == Put && e.Item.Name != "counter" {
				seen[e.Item.Name]++
			}
			if e.Item.Name == "counter" {
				seen["counter"] = 1
			}
		case <-deadline:
			t.Fatalf("the watch delivered %d of %d resources", len(seen), len(items))
		}
	}
	for _, it := range items {
		switch {
		case it.Name == "counter":
			if string(it.Doc) != strconv.Itoa(increments) {
				t.Errorf("counter %s after %d increments succeeded", it.Doc, increments)
			}
		case !landed[it.Name]:
			t.Errorf("%s is stored, but its write failed", it.Name)
		case seen[it.Name] != 1:
			t.Errorf("%s delivered %d times by the watch", it.Name, seen[it.Name])
		}
	}
	if len(items) != len(landed)+1 {
		t.Errorf("%d resources stored, %d writes landed", len(items)-1, len(landed))
	}
}

// countingKV counts the round trips of Gets and transactions, and the keys they return: with
// their values (keys), and names only (names).
type countingKV struct {
	clientv3.KV
	keys  atomic.Int64
	names atomic.Int64
	calls atomic.Int64
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.calls.Add(1)
	return &countingTxn{Txn: c.KV.Txn(ctx), kv: c}
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.calls.Add(1)
	r, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		if clientv3.OpGet(key, opts...).IsKeysOnly() {
			c.names.Add(int64(len(r.Kvs)))
		} else {
			c.keys.Add(int64(len(r.Kvs)))
		}
	}
	return r, err
}

// countingTxn counts the keys a transaction's reads return (with their values).
type countingTxn struct {
	clientv3.Txn
	kv *countingKV
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.Txn.Commit()
	if err == nil {
		for _, resp := range r.Responses {
			t.kv.keys.Add(int64(len(resp.GetResponseRange().GetKvs())))
		}
	}
	return r, err
}

// Listing one type across every mesh, paged (kuma-cp get dataplanes --mesh '*'): every
// page holds the right items, in key order, and the pages read about what they return - a
// page used to read every key of every type of every mesh, so paging through a large store
// read it once per page.
func TestListOneTypeOfEveryMeshPaged(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx := context.Background()
	var want []string
	for _, m := range []string{"a", "a.b", "a-c", "b"} {
		for i := range 3 {
			k := Key{m, "Dataplane", fmt.Sprint("dp-", i)}
			if _, err := s.Put(ctx, k, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			want = append(want, k.String())
		}
		for _, typ := range []string{"Route", "RouteBinding", "Cluster", "Zone"} {
			for i := range 50 {
				if _, err := s.Put(ctx, Key{m, typ, fmt.Sprint("x-", i)}, []byte("x"), 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	slices.Sort(want)
	kv := &countingKV{KV: cl.KV}
	cl.KV = kv
	for _, typ := range []string{"Dataplane", "Route", "RouteBinding"} {
		var got []string
		after, pages := "", 0
		for {
			items, next, _, err := s.List(ctx, "", typ, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, it := range items {
				got = append(got, it.Key.String())
			}
			if next == "" || pages > 200 {
				break
			}
			after = next
		}
		if typ != "Dataplane" {
			if len(got) != 200 {
				t.Errorf("%s: %d items, want 200", typ, len(got))
			}
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s of every mesh, paged: %v\nwant %v", typ, got, want)
		}
	}
	// 12 dataplanes and 400 routes and bindings listed in pages of 2: the values of what
	// they return, and a few names a page (each page reads about its size in names to find
	// the next of the type), not 832 keys a page.
	if n := kv.keys.Load(); n != 412 {
		t.Errorf("%d values read to list 412 items in pages of 2", n)
	}
	if n := kv.names.Load(); n > 1500 {
		t.Errorf("%d names read to list 412 items in pages of 2", n)
	}
	// Unpaged (the route scheduler's pass): the type's values, and fewer names than the
	// store holds (a large mesh's other types are jumped over).
	kv.keys.Store(0)
	kv.names.Store(0)
	items, next, _, err := s.List(ctx, "", "Route", "", 0)
	if err != nil || len(items) != 200 || next != "" {
		t.Fatalf("every mesh's routes: %d, next %q, %v", len(items), next, err)
	}
	if n := kv.keys.Load(); n != 200 {
		t.Errorf("%d values read to list 200 routes", n)
	}
	if n := kv.names.Load(); n > 832 {
		t.Errorf("%d names read to list 200 routes of a store of 832 keys", n)
	}
}

// Count gives what List without paging returns - one mesh, one type of every mesh, a mesh,
// everything - at a revision when asked (a resource created later is not counted then), and
// reads no resource's value to count (count-only reads; for one type of every mesh, names in
// batches: TestCountManyMeshesFewRoundTrips).
func TestCount(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	s := NewEtcd(cl, "/kuma")
	ctx := context.Background()
	var rev int64
	for _, m := range []string{"a", "a.b", "a-c", "b"} {
		for typ, n := range map[string]int{"Dataplane": 3, "Route": 20, "Zone": 5} {
			for i := range n {
				it, err := s.Put(ctx, Key{m, typ, fmt.Sprint("x-", i)}, []byte("x"), 0)
				if err != nil {
					t.Fatal(err)
				}
				rev = it.Version
			}
		}
	}
	if _, err := s.Put(ctx, Key{"b", "Dataplane", "late"}, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	kv := &countingKV{KV: cl.KV}
	cl.KV = kv
	for _, c := range []struct {
		mesh, typ string
		rev       int64
		want      int
	}{
		{"a", "Dataplane", 0, 3}, {"b", "Dataplane", 0, 4}, {"b", "Dataplane", rev, 3},
		{"", "Dataplane", 0, 13}, {"", "Dataplane", rev, 12}, {"", "Route", 0, 80},
		{"a.b", "", 0, 28}, {"", "", 0, 113}, {"", "Nothing", 0, 0}, {"nomesh", "Route", 0, 0},
	} {
		got, err := s.Count(ctx, c.mesh, c.typ, c.rev)
		if err != nil || got != c.want {
			t.Errorf("Count(%q, %q, %d) = %d, %v; want %d", c.mesh, c.typ, c.rev, got, err, c.want)
		}
		if c.mesh == "" && c.typ == "" {
			continue
		}
		items, _, _, err := s.List(ctx, c.mesh, c.typ, "", 0)
		if err == nil && c.rev == 0 && len(items) != c.want {
			t.Errorf("List(%q, %q) = %d items, Count %d", c.mesh, c.typ, len(items), got)
		}
	}
	kv.calls.Store(0)
	kv.keys.Store(0)
	if _, err := s.Count(ctx, "", "Dataplane", 0); err != nil {
		t.Fatal(err)
	}
	if n := kv.keys.Load(); n != 0 {
		t.Errorf("counting the dataplanes of 4 small meshes read %d values", n)
	}
	if n := kv.calls.Load(); n > 1 {
		t.Errorf("counting the dataplanes of 4 small meshes took %d round trips, want one read of their names", n)
	}
}

// A page that is exactly full at the end of a list is the last: no next (a client followed
// it to an empty page) - for one type of every mesh whether later meshes hold only other
// types or nothing, and a next when a later mesh does hold the type.
func TestListLastFullPageHasNoNext(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	put := func(m, typ, name string) {
		t.Helper()
		if _, err := s.Put(ctx, Key{m, typ, name}, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"a", "b"} {
		put(m, "Dataplane", "dp-1")
		put(m, "Dataplane", "dp-2")
	}
	put("c", "Route", "r") // a later mesh without dataplanes
	put("c", "Zone", "z")
	pages := func(mesh, typ string, size int) (n, items int) {
		t.Helper()
		after := ""
		for n < 20 {
			got, next, _, err := s.List(ctx, mesh, typ, after, size)
			if err != nil {
				t.Fatal(err)
			}
			n, items = n+1, items+len(got)
			if next == "" {
				return n, items
			}
			if len(got) == 0 {
				t.Errorf("List(%q, %q, size %d) after %q: an empty page with next %q", mesh, typ, size, after, next)
			}
			after = next
		}
		t.Fatalf("List(%q, %q, size %d): no end", mesh, typ, size)
		return
	}
	for _, tc := range []struct {
		mesh, typ   string
		size, pages int
		items       int
	}{
		{"", "Dataplane", 2, 2, 4},  // full at mesh b's end, mesh c has other types only
		{"", "Dataplane", 4, 1, 4},  // everything on one full page
		{"", "Dataplane", 1, 4, 4},  // full at mesh a's end: mesh b follows (a next)
		{"", "Dataplane", 3, 2, 4},  // not full
		{"a", "Dataplane", 2, 1, 2}, // one mesh
		{"", "", 6, 1, 6},           // everything
		{"", "Route", 1, 1, 1},
	} {
		n, items := pages(tc.mesh, tc.typ, tc.size)
		if n != tc.pages || items != tc.items {
			t.Errorf("List(%q, %q) in pages of %d: %d pages, %d items; want %d pages, %d items", tc.mesh, tc.typ, tc.size, n, items, tc.pages, tc.items)
		}
	}
}

// A page's cursor (the API's after, which any client may send) outside the listed range
// reads nothing outside it: a cursor before a mesh's range listed other meshes' and other
// types' resources under that mesh's list.
func TestListCursorOutsideTheRange(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	for _, m := range []string{"a", "b", "c"} {
		for _, typ := range []string{"Dataplane", "Zone"} {
			if _, err := s.Put(ctx, Key{m, typ, "x"}, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		mesh, typ, after string
		want             []string
	}{
		{"b", "Dataplane", "a/Dataplane/w", []string{"b/Dataplane/x"}},
		{"b", "Dataplane", "a", []string{"b/Dataplane/x"}},
		{"b", "Dataplane", "", []string{"b/Dataplane/x"}},
		{"b", "Dataplane", "b/Dataplane/x", nil},
		{"b", "Dataplane", "b/Zone/x", nil},
		{"b", "", "a/Dataplane/w", []string{"b/Dataplane/x", "b/Zone/x"}},
		{"b", "", "c", nil},
	} {
		for _, size := range []int{0, 10} {
			items, _, _, err := s.List(ctx, tc.mesh, tc.typ, tc.after, size)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Key.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%q, %q, after %q, size %d) = %v, want %v", tc.mesh, tc.typ, tc.after, size, got, tc.want)
			}
		}
	}
}

// Counting one type of every mesh (the total of get TYPE --mesh '*', at every page) takes a
// few round trips however many meshes there are: it took two a mesh, one after the other -
// 4.4 s for 3,000 meshes on three members, over the store's 5 s timeout (every page a 503)
// from about 3,400.
func TestCountManyMeshesFewRoundTrips(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	ctx := context.Background()
	var ops []clientv3.Op
	var rev int64
	for i := range 3000 {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/kuma/m-%05d/Dataplane/x", i), "{}"), clientv3.OpPut(fmt.Sprintf("/kuma/m-%05d/Zone/x", i), "{}"))
		if i%7 == 0 {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/kuma/m-%05d/Dataplane/y", i), "{}"), clientv3.OpPut(fmt.Sprintf("/kuma/m-%05d/Agent/y", i), "{}"))
		}
		if len(ops) >= 100 || i == 2999 {
			r, err := cl.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				t.Fatal(err)
			}
			ops, rev = nil, r.Header.Revision
		}
	}
	// a mesh of many keys among them, and one after a revision
	for i := range 3000 {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/kuma/m-01500/Dataplane/z-%04d", i), "{}"))
		if len(ops) == 100 {
			r, err := cl.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				t.Fatal(err)
			}
			ops, rev = nil, r.Header.Revision
		}
	}
	if _, err := cl.Put(ctx, "/kuma/m-00001/Dataplane/late", "{}"); err != nil {
		t.Fatal(err)
	}
	kv := &countingKV{KV: cl.KV}
	cl.KV = kv
	s := NewEtcd(cl, "/kuma")
	for _, tc := range []struct {
		typ  string
		rev  int64
		want int
	}{{"Dataplane", 0, 3000 + 429 + 3000 + 1}, {"Dataplane", rev, 3000 + 429 + 3000}, {"Agent", 0, 429}, {"Zone", 0, 3000}, {"Route", 0, 0}} {
		kv.calls.Store(0)
		n, err := s.Count(ctx, "", tc.typ, tc.rev)
		if err != nil || n != tc.want {
			t.Errorf("Count(%q, at %d) = %d, %v; want %d", tc.typ, tc.rev, n, err, tc.want)
		}
		if calls := kv.calls.Load(); calls > 40 {
			t.Errorf("Count(%q) of 3,000 meshes: %d round trips", tc.typ, calls)
		}
	}
}

// Listing one type of every mesh (the route scheduler's pass over routers, routes and
// bindings; get TYPE --mesh '*') takes a few round trips however many meshes there are: it
// took two a mesh, one after the other - routers of 3,000 meshes holding none took 4.8 s on
// three members, and their dataplanes were over the store's 5 s timeout (a 503; the
// scheduler's pass failed).
func TestListManyMeshesFewRoundTrips(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	ctx := context.Background()
	s := NewEtcd(cl, "/kuma")
	env, _ := json.Marshal(newEnvelope([]byte("x"), time.Now()))
	var ops []clientv3.Op
	var want []string
	for i := range 3000 {
		m := fmt.Sprintf("m-%05d", i)
		ops = append(ops, clientv3.OpPut("/kuma/"+m+"/Dataplane/x", string(env)), clientv3.OpPut("/kuma/"+m+"/Zone/x", string(env)))
		want = append(want, m+"/Dataplane/x")
		if i == 1500 { // a mesh of many keys, of the type and not
			for j := range 1500 {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("/kuma/%s/Dataplane/y-%04d", m, j), string(env)),
					clientv3.OpPut(fmt.Sprintf("/kuma/%s/Agent/y-%04d", m, j), string(env)))
				want = append(want, fmt.Sprintf("%s/Dataplane/y-%04d", m, j))
			}
		}
		for len(ops) >= 100 || (i == 2999 && len(ops) > 0) {
			n := min(len(ops), 100)
			if _, err := cl.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[n:]
		}
	}
	kv := &countingKV{KV: cl.KV}
	cl.KV = kv
	items, next, _, err := s.List(ctx, "", "Router", "", 0)
	if err != nil || len(items) != 0 || next != "" {
		t.Errorf("routers of 3,000 meshes holding none: %d, next %q, %v", len(items), next, err)
	}
	if n := kv.calls.Load(); n > 40 {
		t.Errorf("routers of 3,000 meshes: %d round trips", n)
	}
	for _, size := range []int{0, 1000, 7} {
		kv.calls.Store(0)
		var got []string
		after, pages := "", 0
		for pages < 2000 {
			items, next, _, err := s.List(ctx, "", "Dataplane", after, size)
			if err != nil {
				t.Fatalf("dataplanes of 3,000 meshes, pages of %d: %v", size, err)
			}
			pages++
			for _, it := range items {
				got = append(got, it.Key.String())
			}
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("dataplanes of 3,000 meshes, pages of %d: %d items, want %d", size, len(got), len(want))
		}
		if size != 7 {
			if n := kv.calls.Load(); n > int64(60*pages) {
				t.Errorf("dataplanes of 3,000 meshes, pages of %d: %d round trips for %d pages", size, n, pages)
			}
		}
	}
}
