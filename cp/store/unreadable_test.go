package store

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// Keys under the prefix that hold no resource - `etcdctl put /kuma/junk/Router/x 'not an
// envelope'`, a key deeper than <mesh>/<type>/<name> (another installation's, under
// /kuma/staging) - are skipped by every list and the watch, each logged once naming the key
// and counted once however often it is listed. (One such key made every list fail: every
// scheduling pass, GET /meshes/*/routers 500, a restarted replica never ready.)
func TestUnreadableKeysSkippedAndReported(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	logs := &testutil.LockedBuffer{}
	s := NewEtcd(cl, "/kuma")
	s.Log = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, _ := json.Marshal(newEnvelope([]byte("doc"), time.Now()))
	for k, v := range map[string]string{
		"/kuma/junk/Router/x":                     "not an envelope",
		"/kuma/staging/default/Router/r":          string(env),
		"/kuma/staging-leader/kuma-cp/694d8a1b2c": "replica-1",
	} {
		if _, err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []Key{{"junk", "Router", "a"}, {"junk", "Router", "z"}, {"default", "Router", "r"}} {
		if _, err := s.Put(ctx, k, []byte("doc"), 0); err != nil {
			t.Fatal(err)
		}
	}
	names := func(items []Item) string {
		var out []string
		for _, it := range items {
			out = append(out, it.Key.String())
		}
		return strings.Join(out, " ")
	}
	for range 3 { // listed again and again: reported once
		all, _, _, err := s.List(ctx, "", "", "", 0)
		if err != nil || names(all) != "default/Router/r junk/Router/a junk/Router/z" {
			t.Fatalf("list of everything: %q %v", names(all), err)
		}
		routers, _, _, err := s.List(ctx, "", "Router", "", 0)
		if err != nil || names(routers) != "default/Router/r junk/Router/a junk/Router/z" {
			t.Fatalf("every mesh's routers: %q %v", names(routers), err)
		}
		junk, _, _, err := s.List(ctx, "junk", "Router", "", 0)
		if err != nil || names(junk) != "junk/Router/a junk/Router/z" {
			t.Fatalf("mesh junk's routers: %q %v", names(junk), err)
		}
	}
	// paged, two at a time: every resource once, whatever the pages skipped
	var paged []Item
	for after := ""; ; {
		items, next, _, err := s.List(ctx, "junk", "", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, items...)
		if next == "" {
			break
		}
		after = next
	}
	if names(paged) != "junk/Router/a junk/Router/z" {
		t.Fatalf("paged: %q", names(paged))
	}
	if n := s.Unreadable(); n != 3 {
		t.Fatalf("%d unreadable keys counted, want 3 (each once):\n%s", n, logs)
	}
	for _, k := range []string{"/kuma/junk/Router/x", "/kuma/staging/default/Router/r", "/kuma/staging-leader/kuma-cp/694d8a1b2c"} {
		if n := strings.Count(logs.String(), "key="+k+" "); n != 1 {
			t.Fatalf("%d lines naming %s, want 1:\n%s", n, k, logs)
		}
	}
	// The watch skips one too, and goes on.
	_, _, rev, _ := s.List(ctx, "", "", "", 0)
	events := s.Watch(ctx, rev)
	if _, err := cl.Put(ctx, "/kuma/junk/Router/y", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Delete(ctx, "/kuma/staging/default/Router/r"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, Key{"default", "Router", "after"}, []byte("doc"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Type != Put || e.Item.Key.String() != "default/Router/after" {
			t.Fatalf("the watch gave %+v, want the write after the unreadable key", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch stopped at the unreadable key")
	}
	if n := s.Unreadable(); n != 4 {
		t.Fatalf("%d unreadable keys counted after the watch's, want 4", n)
	}
}

func TestValidPrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{"/kuma": true, "/kuma-staging": true, "/kuma-leader2": true,
		"/kuma/staging": false, "/kuma/": false, "kuma": false, "": false, "/": false, "/kuma-leader": false, "/a-presence": false, "/a\tb": false} {
		if err := ValidPrefix(prefix); ok != (err == nil) {
			t.Errorf("ValidPrefix(%q): %v", prefix, err)
		}
	}
}
