package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// A transaction writes all or nothing: one stale expectation leaves every key as it was; a
// successful one creates, updates (keeping the creation time) and deletes at once.
func TestTxnAllOrNothing(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	a := Key{"default", "Route", "a"}
	b := Key{"default", "RouteBinding", "a"}
	d := Key{"default", "Route", "gone"}
	ia, err := s.Put(ctx, a, []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(ctx, d, []byte("x"), 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	// Stale version of a: nothing happens, b is not created, d not deleted.
	err = s.Txn(ctx, Write{Key: b, Doc: []byte("bind")}, Write{Key: a, Doc: []byte("v2"), Expect: ia.Version + 100}, Write{Key: d, Delete: true, Expect: Any})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale txn: %v", err)
	}
	if _, err := s.Get(ctx, b); !errors.Is(err, ErrNotFound) {
		t.Errorf("b written by a failed txn: %v", err)
	}
	if _, err := s.Get(ctx, d); err != nil {
		t.Errorf("d deleted by a failed txn: %v", err)
	}
	// The right version: all three at once, a keeps its creation time.
	if err := s.Txn(ctx, Write{Key: b, Doc: []byte("bind")}, Write{Key: a, Doc: []byte("v2"), Expect: ia.Version}, Write{Key: d, Delete: true, Expect: id.Version}); err != nil {
		t.Fatal(err)
	}
	ga, err := s.Get(ctx, a)
	if err != nil || string(ga.Doc) != "v2" || !ga.Created.Equal(ia.Created) || !ga.Modified.After(ia.Created) {
		t.Errorf("a after txn: %+v %v (created %v)", ga, err, ia.Created)
	}
	if gb, err := s.Get(ctx, b); err != nil || string(gb.Doc) != "bind" || gb.Version != ga.Version {
		t.Errorf("b after txn: %+v %v (same revision as a: %d)", gb, err, ga.Version)
	}
	if _, err := s.Get(ctx, d); !errors.Is(err, ErrNotFound) {
		t.Errorf("d after txn: %v", err)
	}
	// Create-only: b exists, so a second create fails and a is untouched.
	if err := s.Txn(ctx, Write{Key: b, Doc: []byte("again")}, Write{Key: a, Doc: []byte("v3"), Expect: ga.Version}); !errors.Is(err, ErrConflict) {
		t.Errorf("second create: %v", err)
	}
	if g, _ := s.Get(ctx, a); string(g.Doc) != "v2" {
		t.Errorf("a changed by a failed txn: %s", g.Doc)
	}
	if err := s.Txn(ctx, Write{Key: Key{"default", "Route", "a/b"}, Doc: []byte("x")}); err == nil {
		t.Error("a key with '/' accepted")
	}
}

// A Check write is a condition only: the transaction lands while the checked key is at the
// version read (0: absent) and writes nothing to it; once that key changed, nothing lands.
func TestTxnCheck(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	guard, gone, w := Key{"default", "Router", "g"}, Key{"default", "Router", "gone"}, Key{"default", "RouteBinding", "w"}
	ig, err := s.Put(ctx, guard, []byte("g1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(ctx, Write{Key: guard, Check: true, Expect: ig.Version}, Write{Key: gone, Check: true}, Write{Key: w, Doc: []byte("1"), Expect: Any}); err != nil {
		t.Fatalf("checks that hold: %v", err)
	}
	if g, err := s.Get(ctx, guard); err != nil || g.Version != ig.Version || string(g.Doc) != "g1" {
		t.Errorf("the checked key was written: %+v %v", g, err)
	}
	if _, err := s.Get(ctx, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("checking an absent key created it: %v", err)
	}
	if _, err := s.Put(ctx, guard, []byte("g2"), Any); err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(ctx, Write{Key: guard, Check: true, Expect: ig.Version}, Write{Key: w, Doc: []byte("2"), Expect: Any}); !errors.Is(err, ErrConflict) {
		t.Errorf("a changed key's check: %v, want a conflict", err)
	}
	if _, err := s.Put(ctx, gone, []byte("now"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Txn(ctx, Write{Key: gone, Check: true}, Write{Key: w, Doc: []byte("3"), Expect: Any}); !errors.Is(err, ErrConflict) {
		t.Errorf("an absent key's check once it exists: %v, want a conflict", err)
	}
	if g, _ := s.Get(ctx, w); string(g.Doc) != "1" {
		t.Errorf("a write landed past a failed check: %q", g.Doc)
	}
}
