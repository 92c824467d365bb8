package dirsource

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// resNames is the names of rs, in order.
func resNames(rs []mesh.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetMeta().Name
	}
	return out
}

// listFor is the list the loader's last snapshot was built from for the file at path, after
// checking that the file cache keeps the same.
func listFor(t *testing.T, l *dirLoader, path string) resList {
	t.Helper()
	for _, p := range l.lastFrom {
		if p.path == path {
			if c, ok := l.cache.kept(path); ok && c.err == nil && c.list != p.list {
				t.Fatalf("%s: the cache keeps another list than the last snapshot's part", path)
			}
			return p.list
		}
	}
	t.Fatalf("%s: not among the last snapshot's files", path)
	return resList{}
}

// holdsStretchOf reports whether any list the loader keeps (the last snapshot's parts, the
// file cache, the last good versions) is a stretch of s's list of dataplanes.
func holdsStretchOf(l *dirLoader, s *mesh.Snapshot) bool {
	for _, p := range l.lastFrom {
		if inside(p.list, s) {
			return true
		}
	}
	for _, f := range l.cache.files {
		if inside(f.list, s) {
			return true
		}
	}
	for _, g := range l.good {
		if inside(g.list, s) {
			return true
		}
	}
	return false
}

// sameAsFresh checks that snap, loaded without error, is the one a fresh loader gives.
func sameAsFresh(t *testing.T, when string, snap *mesh.Snapshot, err error, dpFile, pol string) {
	t.Helper()
	if err != nil { // a file refused: served at its last good version, unknown to a fresh loader
		return
	}
	fresh, _ := newDirLoader().Load(dpFile, pol)
	if fresh == nil || fresh.Hash != snap.Hash || !slices.Equal(names(snap), names(fresh)) {
		t.Fatalf("%s: the snapshot differs from a fresh loader's", when)
	}
}

// An inventory of dataplanes is kept as the stretch of the snapshot's list that holds them
// (the agent's own dataplane among them, in name order), not as a list of its own: read
// back, it gives the file's dataplanes alone, in order. Each new snapshot takes it over
// (through a change of another file, a refusal of the inventory, an edit of the agent's
// dataplane), or the inventory takes a list of its own again when another file puts a
// dataplane among its names, so the loader never holds an older snapshot's list; and the
// snapshot is the one the same files give a fresh loader.
func TestInventoryListIsTheSnapshots(t *testing.T) {
	dir := t.TempDir()
	dpFile := filepath.Join(dir, "self.yaml")
	writeSelf := func(address string) {
		must(t, os.WriteFile(dpFile, []byte(strings.Replace(strings.ReplaceAll(extraDataplane, "NAME", "m-self"),
			"10.9.9.9", address, 1)), 0o644))
	}
	writeSelf("10.9.9.9")
	pol := filepath.Join(dir, "policies")
	must(t, os.MkdirAll(pol, 0o755))
	inv := filepath.Join(pol, "inventory.yaml")
	var sb strings.Builder
	var want []string
	for _, prefix := range []string{"a", "z"} { // a-0 ... a-99, then m-self, then z-0 ...
		for i := range 100 {
			name := fmt.Sprintf("%s-%02d", prefix, i)
			want = append(want, name)
			fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", name))
		}
	}
	must(t, os.WriteFile(inv, []byte(sb.String()), 0o644))
	l := newDirLoader()
	load := func(when string, shared bool) *mesh.Snapshot {
		t.Helper()
		snap, err := l.Load(dpFile, pol)
		if snap == nil {
			t.Fatalf("%s: %v", when, err)
		}
		sameAsFresh(t, when, snap, err, dpFile, pol)
		list := listFor(t, l, inv)
		if shared && (!inside(list, snap) || list.skipsAt() != 100) {
			t.Fatalf("%s: the inventory's list is not the snapshot's (form %d)", when, list.form)
		}
		if !shared && (inside(list, snap) || list.form != formDataplanes) {
			t.Fatalf("%s: the inventory's list is not its own (form %d)", when, list.form)
		}
		if got := resNames(list.all()); !slices.Equal(got, want) {
			t.Fatalf("%s: the inventory's list gives %d dataplanes %v..., want %d", when, len(got), got[:3], len(want))
		}
		return snap
	}
	first := load("first load", true)
	dps := listFor(t, l, inv).all()
	if again, err := l.Load(dpFile, pol); again != first || err != nil {
		t.Fatalf("a load with nothing changed built a new snapshot (%v)", err)
	}

	must(t, os.WriteFile(filepath.Join(pol, "other.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "zz-other")), 0o644))
	second := load("another file added", true)
	if holdsStretchOf(l, first) {
		t.Fatal("the loader still holds the first snapshot's list")
	}
	if again := listFor(t, l, inv).all(); !slices.Equal(again, dps) {
		t.Fatal("the inventory's dataplanes are new objects")
	}

	must(t, os.WriteFile(inv, []byte(sb.String()+"bogus: 1\n"), 0o644))
	must(t, os.Remove(filepath.Join(pol, "other.yaml")))
	third := load("the inventory refused, another file removed", true)
	if _, err := l.Load(dpFile, pol); err == nil {
		t.Fatal("the refused inventory was not reported")
	}
	if len(l.good) == 0 || holdsStretchOf(l, second) {
		t.Fatalf("%d last good versions; the loader still holds the second snapshot's list", len(l.good))
	}

	must(t, os.WriteFile(inv, []byte(sb.String()), 0o644))
	writeSelf("10.9.9.8")
	fourth := load("the agent's dataplane edited", true)
	if fourth.Self == third.Self || holdsStretchOf(l, third) {
		t.Fatal("the loader still holds the third snapshot's list, or self is the same")
	}

	// a dataplane among the inventory's names: the inventory is no longer in a row
	mid := filepath.Join(pol, "mid.yaml")
	must(t, os.WriteFile(mid, []byte(strings.ReplaceAll(extraDataplane, "NAME", "b-mid")), 0o644))
	fifth := load("a dataplane among the inventory's", false)
	if holdsStretchOf(l, fourth) {
		t.Fatal("the loader still holds the fourth snapshot's list")
	}
	must(t, os.Remove(mid))
	load("that dataplane removed", true)
	if holdsStretchOf(l, fifth) {
		t.Fatal("the loader still holds the fifth snapshot's list")
	}
}

// Files whose dataplanes are not in a row in the snapshot keep lists of their own: two
// inventories of interleaved names, a file with the copy of the agent's own dataplane (the
// dataplane file's wins), a file with another mesh's. Read back, each gives its file's
// dataplanes, the copy and the other mesh's included. A file of one dataplane keeps its
// pointer alone.
func TestListsNotInARowAreTheirOwn(t *testing.T) {
	dir := t.TempDir()
	dpFile := filepath.Join(dir, "self.yaml")
	must(t, os.WriteFile(dpFile, []byte(strings.ReplaceAll(extraDataplane, "NAME", "m-self")), 0o644))
	pol := filepath.Join(dir, "policies")
	must(t, os.MkdirAll(pol, 0o755))
	files := map[string][]string{
		"even.yaml":  {"a-0", "a-2", "a-4"},
		"odd.yaml":   {"a-1", "a-3", "a-5"},
		"copy.yaml":  {"c-0", "m-self", "x-0"},
		"mesh2.yaml": {"d-0", "d-1", "d-2"},
		"one.yaml":   {"e-0"},
		"row.yaml":   {"f-0", "f-1"},
	}
	for f, ns := range files {
		var sb strings.Builder
		for _, n := range ns {
			doc := strings.ReplaceAll(extraDataplane, "NAME", n)
			if f == "mesh2.yaml" && n == "d-1" {
				doc = strings.Replace(doc, "mesh: default", "mesh: other", 1)
			}
			fmt.Fprintf(&sb, "%s---\n", doc)
		}
		must(t, os.WriteFile(filepath.Join(pol, f), []byte(sb.String()), 0o644))
	}
	l := newDirLoader()
	snap, err := l.Load(dpFile, pol)
	if err != nil {
		t.Fatal(err)
	}
	for f, ns := range files {
		list := listFor(t, l, filepath.Join(pol, f))
		if got := resNames(list.all()); !slices.Equal(got, ns) {
			t.Errorf("%s gives %v, want %v", f, got, ns)
		}
		switch f {
		case "one.yaml":
			if list.form != formDataplane {
				t.Errorf("%s: form %d, want its dataplane's pointer alone", f, list.form)
			}
		case "row.yaml":
			if !inside(list, snap) {
				t.Errorf("%s: in a row in the snapshot, but not kept as its stretch", f)
			}
		default:
			if inside(list, snap) || list.form != formDataplanes {
				t.Errorf("%s: not in a row in the snapshot, but not a list of its own (form %d)", f, list.form)
			}
		}
	}
}

// A dataplane reaching some services keeps, of an inventory, their dataplanes alone: the
// inventory's list is those, a stretch of the snapshot's (the agent's own among them),
// and a new list of reachable services gives a stretch of the new snapshot's (the agent's
// own dataplane, me, after them).
func TestReachableInventoryListIsTheSnapshots(t *testing.T) {
	dpFile, pol := reachMesh(t, t.TempDir(), "a", "c") // a-1 a-2 c-1 c-2 kept, then me
	inv := filepath.Join(pol, "dataplanes.yaml")
	l := newDirLoader()
	for _, c := range []struct {
		reach []string
		want  []string
	}{
		{[]string{"a", "c"}, []string{"a-1", "a-2", "c-1", "c-2"}},
		{[]string{"b", "c"}, []string{"b-1", "b-2", "c-1", "c-2"}},
	} {
		writeReach(t, dpFile, c.reach...)
		snap, err := l.Load(dpFile, pol)
		must(t, err)
		list := listFor(t, l, inv)
		if got := resNames(list.all()); !slices.Equal(got, c.want) || !inside(list, snap) || list.form != formDataplanes {
			t.Fatalf("reaching %v: the inventory's list gives %v (form %d, the snapshot's: %v)", c.reach, got, list.form, inside(list, snap))
		}
	}
}

// A file of dataplanes refused keeps its last good version as the list alone (read back
// when served), not also as a list of resources made from it: a second list of the file.
func TestRefusedInventoryKeepsOneList(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	inventory(t, inv, "svc", 3)
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	good, err := os.ReadFile(inv)
	must(t, err)
	must(t, os.WriteFile(inv, append(good, "  bogus: 1\n"...), 0o644))
	snap, err := l.Load(exampleDataplane, dir)
	var rf *RefusedFiles
	if !errors.As(err, &rf) || snap == nil {
		t.Fatalf("the broken inventory: %v, %v; want it refused, the last good version served", snap, err)
	}
	g, ok := l.good[inv]
	if !ok || g.list.n != 3 || !g.list.dataplanes() {
		t.Fatalf("the last good version kept: %+v (%v), want its 3 dataplanes", g, ok)
	}
	if g.res != nil {
		t.Fatalf("the last good version keeps a list of %d resources beside its list", len(g.res))
	}
	if got := resNames(g.list.all()); !slices.Equal(got, []string{"svc0", "svc1", "svc2"}) {
		t.Fatalf("the last good version reads back %v", got)
	}
}

// What looks at a cached file of dataplanes without serving its resources (a check of its
// stamp that finds it changed, a refusal keeping its last good version) does not read its
// list back (resList.all: a list of 16 bytes a dataplane, garbage at once).
func TestCachedInventoryNotReadBackForNothing(t *testing.T) {
	const n = 4000
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	inventory(t, inv, "svc", n)
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	later := time.Now().Add(time.Hour)
	must(t, os.Chtimes(inv, later, later)) // its stamp changed: to decode (or sum) again
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	todo := l.toDecode([]string{inv}, make([]cachedFile, 1))
	runtime.ReadMemStats(&after)
	if len(todo) != 1 {
		t.Fatalf("a touched inventory: %d files to decode, want 1", len(todo))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > n*16/2 {
		t.Errorf("checking a touched inventory's stamp allocated %d bytes: its %d dataplanes' list read back", got, n)
	}
	if allocs := testing.AllocsPerRun(5, func() {
		delete(l.good, inv)
		l.keepGood(inv)
	}); allocs != 0 {
		t.Errorf("keeping an inventory's last good version allocated %.0f times", allocs)
	}
	if g := l.good[inv]; g.res != nil || g.list.n != n {
		t.Fatalf("the last good version kept: %d resources beside a list of %d, want a list of %d alone", len(g.res), g.list.n, n)
	}
}

// A forced reload (forget) takes each cached file's content hash without reading its list
// back.
func TestForgetReadsNoListBack(t *testing.T) {
	const n = 4000
	dir := t.TempDir()
	inventory(t, filepath.Join(dir, "inventory.yaml"), "svc", n)
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l.forget()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > n*16/2 {
		t.Errorf("forget allocated %d bytes: the inventory's %d dataplanes' list read back", got, n)
	}
	if len(l.forgot) != l.cache.len() {
		t.Fatalf("forget kept %d files' hashes, want the %d cached", len(l.forgot), l.cache.len())
	}
}
