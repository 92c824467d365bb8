package fanout

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// Agents that hold nothing are sent the table's one shared encoding: each gets every
// resource, with its own nonce that its ACK is matched on, and the table is encoded once per
// version whatever the number of agents. After a change a fresh agent is sent the same
// encoding, then the change; after more changes than the table's bound, one made anew.
func TestFreshSubscriptionsShareOneEncoding(t *testing.T) {
	cp, addr := startCP(t, servedN(50, 0))
	want := make([]string, 50)
	for i := range want {
		want[i] = fmt.Sprintf("dp-%d", i)
	}
	slices.Sort(want)
	var first []*agent
	for range 3 {
		a := dial(t, addr, "default", nil, mesh.KindDataplane)
		r := a.recv()
		if got := names(r); !slices.Equal(got, want) {
			t.Fatalf("a fresh agent got %v, want every Dataplane %v", got, want)
		}
		if r.GetNonce() == "" || r.GetTypeUrl() == "" || r.GetSystemVersionInfo() == "" {
			t.Fatalf("the shared answer lacks its nonce, type URL or version: %q %q %q", r.GetNonce(), r.GetTypeUrl(), r.GetSystemVersionInfo())
		}
		a.ack(r)
		first = append(first, a)
	}
	tbl := cp.tableFor("default", mesh.KindDataplane)
	if n, _ := builds(tbl); n != 1 {
		t.Fatalf("the full answer was encoded %d times for 3 agents at one version, want once", n)
	}

	// The ACK was matched (the nonce appended is the stream's): a change reaches each agent.
	sv := servedN(50, 0)
	sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-3", Body: []byte("dp 3 changed")})
	cp.Apply(sv)
	for _, a := range first {
		if got := names(a.recv()); !slices.Equal(got, []string{"dp-3"}) {
			t.Fatalf("after one change an agent got %v, want [dp-3]", got)
		}
	}
	late := dial(t, addr, "default", nil, mesh.KindDataplane)
	r := late.recv()
	if len(r.GetResources()) != 50 {
		t.Fatalf("a fresh agent after the change got %d resources, want 50", len(r.GetResources()))
	}
	late.ack(r)
	since := late.recv()
	if got := names(since); !slices.Equal(got, []string{"dp-3"}) {
		t.Fatalf("a fresh agent after the shared answer got %v, want the change since, [dp-3]", got)
	}
	late.ack(since)
	if v := late.held[r.GetTypeUrl()]["dp-3"]; v != first[0].held[r.GetTypeUrl()]["dp-3"] {
		t.Fatalf("a fresh agent after the change holds dp-3 at %s, the others at %s", v, first[0].held[r.GetTypeUrl()]["dp-3"])
	}
	if n, _ := builds(tbl); n != 1 {
		t.Fatalf("after one change the full answer was encoded %d times in all, want once", n)
	}

	// 64 changes more (the bound for a small table): the next fresh agent's answer is new.
	for gen := 1; gen <= 64; gen++ {
		cp.Apply(servedN(50, gen)) // each changes all 50
	}
	fresh := dial(t, addr, "default", nil, mesh.KindDataplane)
	r = fresh.recv()
	fresh.ack(r)
	fresh.quiet(100 * time.Millisecond) // nothing changed since its answer
	tbl.mu.RLock()
	current := tbl.entries["dp-3"].res.Version
	tbl.mu.RUnlock()
	if v := fresh.held[r.GetTypeUrl()]["dp-3"]; v != current {
		t.Fatalf("a fresh agent after many changes holds dp-3 at %s, the table at %s", v, current)
	}
	if n, _ := builds(tbl); n != 2 {
		t.Fatalf("after many changes the full answer was encoded %d times in all, want 2", n)
	}
}

// builds is how many times t's full answer was encoded, and compressed.
func builds(t *table) (encoded, compressed int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.fullBuilds, t.gzipBuilds
}

// First syncs are served in turn within the budget: while one agent's full answer is
// unacknowledged and fills the budget, the next agent waits; its turn comes with the first
// agent's ACK, and a stream that ends while holding its share gives it back.
func TestFirstSyncsWaitTheirTurn(t *testing.T) {
	sv := servedN(200, 0)
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.Apply(sv)
	cp.first = newFirstSyncs(int64(cp.tableFor("default", mesh.KindDataplane).fullSize(false))) // room for one answer at a time
	cp.first.hold.Store(int64(time.Minute))
	addr := serve(t, cp)

	a := dial(t, addr, "default", nil, mesh.KindDataplane)
	ra := a.recv()
	b := dial(t, addr, "default", nil, mesh.KindDataplane)
	b.quiet(300 * time.Millisecond) // a holds the budget until it ACKs
	if w := cp.first.waiting.Load(); w != 1 {
		t.Fatalf("%d streams waiting for a first sync, want 1 (b)", w)
	}
	a.ack(ra)
	if n := len(b.recv().GetResources()); n != 200 {
		t.Fatalf("b's turn: %d resources, want 200", n)
	}
	// b does not ACK but goes away: c gets its turn all the same.
	b.close()
	c := dial(t, addr, "default", nil, mesh.KindDataplane)
	rc := c.recv()
	if n := len(rc.GetResources()); n != 200 {
		t.Fatalf("c after b left: %d resources, want 200", n)
	}
	// An agent that neither ACKs nor goes away holds its turn for the hold time only.
	cp.first.hold.Store(int64(200 * time.Millisecond))
	c.ack(rc) // c's turn was taken with the minute's hold: give it back
	d := dial(t, addr, "default", nil, mesh.KindDataplane)
	d.recv() // d holds the budget, without ACKing, for 200 ms
	e := dial(t, addr, "default", nil, mesh.KindDataplane)
	if n := len(e.recv().GetResources()); n != 200 {
		t.Fatalf("e after d's hold: %d resources, want 200", n)
	}
	if n := cp.first.expired.Load(); n != 1 {
		t.Fatalf("%d shares given back by the hold, want 1 (d's)", n)
	}
}

// A stream whose next first sync waits for its turn still reads its agent's requests: the
// ACK of the answer it already sent gives that answer's share back, which lets the next one
// through. Before, the stream waited for the turn without reading, its ACK unread, and the
// fleet moved only as each hold (then 1 s) ran out.
func TestFirstSyncACKReadWhileNextWaits(t *testing.T) {
	sv := servedN(200, 0)
	sv.Put(Doc{Kind: mesh.KindVirtualOutbound, Mesh: "default", Name: "vo-1", Body: []byte("vo 1")})
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.Apply(sv)
	cp.first = newFirstSyncs(int64(cp.tableFor("default", mesh.KindDataplane).fullSize(false))) // room for the Dataplanes' answer only
	cp.first.hold.Store(int64(time.Minute))
	addr := serve(t, cp)

	a := dial(t, addr, "default", nil, mesh.KindDataplane, mesh.KindVirtualOutbound)
	r := a.recv()
	if n := len(r.GetResources()); n != 200 {
		t.Fatalf("first answer: %d resources, want the 200 Dataplanes", n)
	}
	a.quiet(200 * time.Millisecond) // the VirtualOutbounds wait for the Dataplanes' ACK
	a.ack(r)
	if got := names(a.recv()); !slices.Equal(got, []string{"vo-1"}) {
		t.Fatalf("after the ACK: %v, want [vo-1]", got)
	}
	if e := cp.first.expired.Load(); e != 0 {
		t.Fatalf("%d shares given back by the hold, want 0 (the ACK gives them back)", e)
	}
}
