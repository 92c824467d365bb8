package dirstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
)

func dpDoc(name, svc string) string {
	return fmt.Sprintf("type: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 8080\n      tags:\n        kuma.io/service: %s\n", name, svc)
}

func newTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// A write lands in one file per resource; versions move on at every write; a stale version
// or a create over an existing resource is refused.
func TestStoreWritesFilesWithVersions(t *testing.T) {
	ctx := context.Background()
	st, dir := newTestStore(t)
	k := store.Key{Mesh: "default", Type: "Dataplane", Name: "web-1"}
	it, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web")), 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "default", "dataplane-web-1.yaml")
	if b, err := os.ReadFile(path); err != nil || string(b) != dpDoc("web-1", "web") {
		t.Fatalf("the file %s: %q, %v", path, b, err)
	}
	if _, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web")), 0); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create over an existing resource: %v, want ErrExists", err)
	}
	it2, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web2")), it.Version)
	if err != nil || it2.Version <= it.Version {
		t.Fatalf("update with the version read: %v, version %d after %d", err, it2.Version, it.Version)
	}
	if _, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web3")), it.Version); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update with a stale version: %v, want ErrConflict", err)
	}
	if got, _ := st.Get(ctx, k); !strings.Contains(string(got.Doc), "web2") || got.Version != it2.Version {
		t.Fatalf("after the refused write: version %d doc %q", got.Version, got.Doc)
	}
	// An edit by hand is a new version: a write with the version read before it is refused.
	if err := os.WriteFile(path, []byte(dpDoc("web-1", "by-hand")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web4")), it2.Version); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("write over a hand edit with the version read before it: %v, want ErrConflict", err)
	}
	// A version from an earlier process never matches.
	st2, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := st2.Get(ctx, k); got.Version <= it2.Version {
		t.Fatalf("a new process gives version %d, not above the earlier %d", got.Version, it2.Version)
	}
	if err := st.Delete(ctx, k, it.Version); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete with a stale version: %v", err)
	}
	if err := st.Delete(ctx, k, store.Any); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file is still there after the delete: %v", err)
	}
	if _, err := st.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// A document that would be read back under another key is refused before anything is written.
	hg := "type: HostnameGenerator\nname: everywhere\nspec:\n  targetRef:\n    kind: MeshExternalService\n  template: \"{{ name }}.ext\"\n"
	if _, err := st.Put(ctx, store.Key{Mesh: "prod", Type: "HostnameGenerator", Name: "everywhere"}, []byte(hg), 0); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "default/HostnameGenerator/everywhere") {
		t.Fatalf("a meshless document under mesh prod: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "prod")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused write left %s behind: %v", filepath.Join(dir, "prod"), err)
	}
	if _, err := st.Put(ctx, store.Key{Mesh: "default", Type: "HostnameGenerator", Name: "everywhere"}, []byte(hg), 0); err != nil {
		t.Fatal(err)
	}
	// Names that are not file names stay inside the directory (mesh's own rules refuse
	// them first; this is the store's own guard).
	for in, want := range map[string]string{"..x": "_.x", "a b/c": "a_b_c", "web-1.v2": "web-1.v2"} {
		if got := safeName(in); got != want {
			t.Errorf("safeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// A resource in a hand-written file of several documents is updated and deleted in place:
// the other documents (and comments) stay byte for byte.
func TestStoreEditsMultiDocumentFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	orig := "# the inventory\n---\n" + dpDoc("a", "a") + "---\n# b's comment\n" + dpDoc("b", "b") + "--- # c next\n" + dpDoc("c", "c")
	path := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, _, _, err := st.List(ctx, "default", "Dataplane", "", 0)
	if err != nil || len(items) != 3 {
		t.Fatalf("list: %d items, %v", len(items), err)
	}
	kb := store.Key{Mesh: "default", Type: "Dataplane", Name: "b"}
	b, _ := st.Get(ctx, kb)
	if _, err := st.Put(ctx, kb, []byte(dpDoc("b", "b2")), b.Version); err != nil {
		t.Fatal(err)
	}
	want := "# the inventory\n---\n" + dpDoc("a", "a") + "---\n" + dpDoc("b", "b2") + "--- # c next\n" + dpDoc("c", "c")
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Fatalf("after the update:\n%s\nwant:\n%s", got, want)
	}
	ka := store.Key{Mesh: "default", Type: "Dataplane", Name: "a"}
	a, _ := st.Get(ctx, ka)
	if err := st.Delete(ctx, ka, a.Version); err != nil {
		t.Fatal(err)
	}
	want = "# the inventory\n---\n" + dpDoc("b", "b2") + "--- # c next\n" + dpDoc("c", "c")
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Fatalf("after the delete:\n%s\nwant:\n%s", got, want)
	}
	// The others kept their versions (they did not change).
	c1, _ := st.Get(ctx, store.Key{Mesh: "default", Type: "Dataplane", Name: "c"})
	items, _, _, _ = st.List(ctx, "", "", "", 0)
	if len(items) != 2 || items[1].Name != "c" || items[1].Version != c1.Version {
		t.Fatalf("list after: %+v", items)
	}
}

// 20 writers read, change and write one resource at once: each write lands or gets a
// conflict, and none is lost.
func TestStoreConcurrentWritersNoLostUpdate(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	k := store.Key{Mesh: "default", Type: "Dataplane", Name: "web-1"}
	if _, err := st.Put(ctx, k, []byte(dpDoc("web-1", "n0")), 0); err != nil {
		t.Fatal(err)
	}
	var landed, conflicts int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				cur, err := st.Get(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				var n int
				fmt.Sscanf(strings.SplitAfter(string(cur.Doc), "kuma.io/service: n")[1], "%d", &n)
				_, err = st.Put(ctx, k, []byte(dpDoc("web-1", fmt.Sprintf("n%d", n+1))), cur.Version)
				mu.Lock()
				switch {
				case err == nil:
					landed++
				case errors.Is(err, store.ErrConflict):
					conflicts++
				default:
					t.Errorf("writer %d: %v", w, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got, _ := st.Get(ctx, k)
	if !strings.Contains(string(got.Doc), fmt.Sprintf("kuma.io/service: n%d\n", landed)) {
		t.Fatalf("%d writes landed (%d conflicts), but the resource holds %q: an update was lost", landed, conflicts, got.Doc)
	}
	if landed+conflicts != 100 || landed == 0 {
		t.Fatalf("landed %d + conflicts %d, want 100 in all", landed, conflicts)
	}
}

// Watch delivers the writes and the hand edits, in order, from the revision of a list.
func TestStoreWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, dir := newTestStore(t)
	_, _, rev, _ := st.List(ctx, "", "", "", 0)
	events := st.Watch(ctx, rev)
	k := store.Key{Mesh: "default", Type: "Dataplane", Name: "web-1"}
	it, err := st.Put(ctx, k, []byte(dpDoc("web-1", "web")), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hand.yaml"), []byte(dpDoc("hand-1", "hand")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, k, it.Version); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 {
		select {
		case e := <-events:
			got = append(got, fmt.Sprintf("%d %s", e.Type, e.Item.Name))
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far %v, want 3", got)
		}
	}
	want := []string{fmt.Sprintf("%d web-1", store.Put), fmt.Sprintf("%d hand-1", store.Put), fmt.Sprintf("%d web-1", store.Delete)}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestStoreListPages(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	for i := range 5 {
		name := fmt.Sprintf("dp-%d", i)
		if _, err := st.Put(ctx, store.Key{Mesh: "default", Type: "Dataplane", Name: name}, []byte(dpDoc(name, "s")), 0); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	after := ""
	for pages := 0; ; pages++ {
		items, next, _, err := st.List(ctx, "default", "Dataplane", after, 2)
		if err != nil || pages > 5 {
			t.Fatal(err, pages)
		}
		for _, it := range items {
			names = append(names, it.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if strings.Join(names, ",") != "dp-0,dp-1,dp-2,dp-3,dp-4" {
		t.Fatalf("pages gave %v", names)
	}
}

// A file edited by hand and left half-written (or invalid) keeps its resources as they were
// at its last good version, as the agents are served them (Dir keeps the last good file):
// they are still read, a create of one of them is refused (it used to vanish, and a create
// wrote a second copy in a file of its own, defined twice once the file was fixed), and a
// write to one of them is refused naming the file and its problem (it used to land in the
// broken file, which the agents never read) - until the file is fixed.
func TestStoreHalfWrittenFileKeepsLastGood(t *testing.T) {
	ctx := context.Background()
	st, dir := newTestStore(t)
	path := filepath.Join(dir, "hand.yaml")
	good := dpDoc("a", "web") + "---\n" + dpDoc("b", "web")
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	ka := store.Key{Mesh: "default", Type: "Dataplane", Name: "a"}
	kb := store.Key{Mesh: "default", Type: "Dataplane", Name: "b"}
	a, err := st.Get(ctx, ka)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Get(ctx, kb)
	if err != nil {
		t.Fatal(err)
	}
	edited := dpDoc("a", "web") + "---\n" + dpDoc("b", "web2")
	half := edited[:len(edited)-25]
	if err := os.WriteFile(path, []byte(half), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, kb); err != nil || got.Version != b.Version || string(got.Doc) != string(b.Doc) {
		t.Fatalf("b in a half-written file: version %d %v, want its last good version %d", got.Version, err, b.Version)
	}
	if items, _, _, _ := st.List(ctx, "default", "Dataplane", "", 0); len(items) != 2 {
		t.Fatalf("listed %d resources, want the last good 2", len(items))
	}
	if _, err := st.Put(ctx, kb, []byte(dpDoc("b", "api")), 0); !errors.Is(err, store.ErrExists) {
		t.Fatalf("create b while its file is broken: %v, want ErrExists", err)
	}
	_, err = st.Put(ctx, ka, []byte(dpDoc("a", "api")), a.Version)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), path) {
		t.Fatalf("update a while its file is broken: %v, want a conflict naming %s", err, path)
	}
	if err := st.Delete(ctx, kb, b.Version); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete b while its file is broken: %v, want a conflict", err)
	}
	if data, _ := os.ReadFile(path); string(data) != half {
		t.Fatalf("the broken file was written:\n%s", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("files besides hand.yaml: %v", entries)
	}
	// Fixed: its resources are read again, and writes work.
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, kb)
	if err != nil || !strings.Contains(string(got.Doc), "web2") || got.Version <= b.Version {
		t.Fatalf("b after the fix: %+v %v", got, err)
	}
	if _, err := st.Put(ctx, ka, []byte(dpDoc("a", "api")), a.Version); err != nil {
		t.Fatalf("update a after the fix: %v", err)
	}
}

// A file renamed by hand (b.yaml to c.yaml), and a resource defined in two files whose
// first (the one that counts) is removed: the resource is still there, read from the file
// that holds it now - it used to vanish for good (the new file was indexed while the old one
// still held the resource, then the old one's removal dropped it, and the new file, unchanged,
// was never read again).
func TestStoreFileRenamedByHand(t *testing.T) {
	ctx := context.Background()
	st, dir := newTestStore(t)
	k := store.Key{Mesh: "default", Type: "Dataplane", Name: "a"}
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(dpDoc("a", "web")), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := st.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := st.Get(ctx, k); err != nil || string(got.Doc) != string(before.Doc) {
			t.Fatalf("after b.yaml was renamed c.yaml: %v", err)
		}
	}
	if _, err := st.Put(ctx, k, []byte(dpDoc("a", "api")), 0); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a create of the renamed resource: %v, want ErrExists", err)
	}
	// Defined in c.yaml and d.yaml (c.yaml counts); c.yaml removed: d.yaml's counts.
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(dpDoc("a", "other")), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, k); !strings.Contains(string(got.Doc), "web") {
		t.Fatalf("with two files defining it, the first should count: %s", got.Doc)
	}
	if err := os.Remove(filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, k); err != nil || !strings.Contains(string(got.Doc), "other") {
		t.Fatalf("after the first file was removed: %q %v, want d.yaml's", got.Doc, err)
	}
}

// A resource with a name of 253 characters (the longest valid) gets a file: its file name is
// shortened to fit the file system's 255 bytes (it used to fail with "file name too long").
func TestStoreLongName(t *testing.T) {
	ctx := context.Background()
	st, dir := newTestStore(t)
	for _, c := range []string{"a", "b"} {
		name := strings.Repeat(c, 240) + "-" + strings.Repeat("x", 12)
		k := store.Key{Mesh: "default", Type: "Dataplane", Name: name}
		it, err := st.Put(ctx, k, []byte(dpDoc(name, "web")), 0)
		if err != nil {
			t.Fatalf("a %d-character name: %v", len(name), err)
		}
		if got, err := st.Get(ctx, k); err != nil || got.Version != it.Version {
			t.Fatalf("read back: %v", err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "default"))
	if err != nil || len(entries) != 2 {
		t.Fatalf("files: %v %v", entries, err)
	}
}

// A file edited by hand between the store's look at it and its rewrite (a document added
// before the one written): the write is refused as a conflict and the hand edit stays - it
// used to replace the document at the index the store had seen, another resource's in the
// edited file, which vanished while the written one was there twice.
func TestStoreHandEditDuringWrite(t *testing.T) {
	ctx := context.Background()
	st, dir := newTestStore(t)
	path := filepath.Join(dir, "hand.yaml")
	if err := os.WriteFile(path, []byte(dpDoc("a", "web")+"---\n"+dpDoc("b", "web")), 0o644); err != nil {
		t.Fatal(err)
	}
	kb := store.Key{Mesh: "default", Type: "Dataplane", Name: "b"}
	b, err := st.Get(ctx, kb)
	if err != nil {
		t.Fatal(err)
	}
	edited := dpDoc("new", "web") + "---\n" + dpDoc("a", "web") + "---\n" + dpDoc("b", "web")
	for i, write := range []func() error{
		func() error { _, err := st.Put(ctx, kb, []byte(dpDoc("b", "api")), b.Version); return err },
		func() error { return st.Delete(ctx, kb, b.Version) },
	} {
		edited = fmt.Sprintf("# edit %d\n", i) + edited
		testHookBeforeRewrite = func(string) {
			if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
				t.Error(err)
			}
		}
		err := write()
		testHookBeforeRewrite = nil
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), path) {
			t.Fatalf("a write while the file was edited: %v, want a conflict naming %s", err, path)
		}
		if data, _ := os.ReadFile(path); string(data) != edited {
			t.Fatalf("the hand edit was overwritten:\n%s", data)
		}
		if b, err = st.Get(ctx, kb); err != nil {
			t.Fatal(err)
		}
	}
}
