package dirsource

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// reachMesh writes a dataplane file reaching the services listed (none: every service)
// and an inventory of dataplanes of services a, b and c (two each).
func reachMesh(t *testing.T, dir string, reachable ...string) (dpFile, policies string) {
	t.Helper()
	dpFile, policies = filepath.Join(dir, "dp.yaml"), filepath.Join(dir, "policies")
	must(t, os.MkdirAll(policies, 0o755))
	writeReach(t, dpFile, reachable...)
	var b strings.Builder
	for _, svc := range []string{"a", "b", "c"} {
		for i := 1; i <= 2; i++ {
			fmt.Fprintf(&b, "type: Dataplane\nmesh: default\nname: %s-%d\nnetworking:\n  address: 10.0.0.%d\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: %s\n---\n",
				svc, i, i, svc)
		}
	}
	must(t, os.WriteFile(filepath.Join(policies, "dataplanes.yaml"), []byte(b.String()), 0o644))
	return dpFile, policies
}

func writeReach(t *testing.T, dpFile string, reachable ...string) {
	t.Helper()
	doc := "type: Dataplane\nmesh: default\nname: me\nnetworking:\n  address: 10.0.1.1\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: me\n"
	if len(reachable) > 0 {
		doc += "  transparentProxying:\n    reachableServices: [" + strings.Join(reachable, ", ") + "]\n"
	}
	must(t, os.WriteFile(dpFile, []byte(doc), 0o644))
}

func names(s *mesh.Snapshot) []string {
	var out []string
	for _, dp := range s.Dataplanes {
		out = append(out, dp.Name)
	}
	return out
}

// Only the dataplanes of reachable services are kept, in the snapshot and in the cache; a
// new list decodes the files again, for the new list.
func TestDirLoaderKeepsReachableDataplanes(t *testing.T) {
	dpFile, policies := reachMesh(t, t.TempDir(), "a")
	l := newDirLoader()
	s, err := l.Load(dpFile, policies)
	must(t, err)
	if got, want := names(s), []string{"a-1", "a-2", "me"}; !slices.Equal(got, want) {
		t.Fatalf("dataplanes %q, want %q", got, want)
	}
	inv := filepath.Join(policies, "dataplanes.yaml")
	if got := len(l.cache.entry(inv).res); got != 2 {
		t.Errorf("the cache holds %d resources of the inventory, want the 2 reachable", got)
	}
	decodes := l.decodes

	writeReach(t, dpFile, "b", "c")
	s, err = l.Load(dpFile, policies)
	must(t, err)
	if got, want := names(s), []string{"b-1", "b-2", "c-1", "c-2", "me"}; !slices.Equal(got, want) {
		t.Fatalf("after the list changed: dataplanes %q, want %q", got, want)
	}
	if l.decodes != decodes+2 {
		t.Errorf("after the list changed: %d files decoded, want both again", l.decodes-decodes)
	}

	writeReach(t, dpFile) // no list: every service
	s, err = l.Load(dpFile, policies)
	must(t, err)
	if got := len(s.Dataplanes); got != 7 {
		t.Fatalf("without reachableServices: %d dataplanes, want 7 (%q)", got, names(s))
	}
}

// persistedReachMesh is reachMesh in a temporary directory, loaded and its decode cache
// written.
func persistedReachMesh(t *testing.T, reachable ...string) (dpFile, policies, cache string) {
	t.Helper()
	dir := t.TempDir()
	dpFile, policies = reachMesh(t, dir, reachable...)
	cache = filepath.Join(dir, "model-cache")
	l := newDirLoader()
	_, err := l.Load(dpFile, policies)
	must(t, err)
	if wrote, err := l.persist(cache); !wrote || err != nil {
		t.Fatalf("persist: %v %v", wrote, err)
	}
	return dpFile, policies, cache
}

// A cache written for one list is not used for another: the files are decoded again.
func TestDecodeCacheOfAnotherReachIgnored(t *testing.T) {
	dpFile, policies, cache := persistedReachMesh(t, "a")

	same := newDirLoader()
	if n, err := same.restore(cache); n != 1 || err != nil {
		t.Fatalf("restore: %d files, %v", n, err)
	}
	s, err := same.Load(dpFile, policies)
	must(t, err)
	if same.decodes != 1 || len(s.Dataplanes) != 3 {
		t.Errorf("same list: %d decodes (want the dataplane file only), %d dataplanes", same.decodes, len(s.Dataplanes))
	}

	writeReach(t, dpFile, "c")
	other := newDirLoader()
	if _, err := other.restore(cache); err != nil {
		t.Fatal(err)
	}
	s, err = other.Load(dpFile, policies)
	must(t, err)
	if got, want := names(s), []string{"c-1", "c-2", "me"}; !slices.Equal(got, want) {
		t.Fatalf("another list from a restored cache: dataplanes %q, want %q", got, want)
	}
}

// After a restart from a cache kept for a list of reachable services, a file changed while
// the agent was down and decoded before the dataplane file decodes (it is broken) is not
// cached whole under that list: once the dataplane file is fixed, the cache holds only the
// reachable dataplanes of it.
func TestRestoredReachNotGivenToUnfilteredFiles(t *testing.T) {
	dpFile, policies, cache := persistedReachMesh(t, "a")
	inv := filepath.Join(policies, "dataplanes.yaml")
	f, err := os.OpenFile(inv, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString("type: Dataplane\nmesh: default\nname: c-3\nnetworking:\n  address: 10.0.0.3\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: c\n")
	must(t, err)
	must(t, f.Close())
	must(t, os.WriteFile(dpFile, []byte("type: Dataplane\nname: [broken\n"), 0o644))

	restarted := newDirLoader()
	if n, err := restarted.restore(cache); n != 1 || err != nil {
		t.Fatalf("restore: %d files, %v", n, err)
	}
	if _, err := restarted.Load(dpFile, policies); err == nil {
		t.Fatal("a broken dataplane file loaded")
	}
	if c, ok := restarted.cache.get(inv); ok && len(c.res) != 2 {
		t.Fatalf("with the dataplane file broken, the changed inventory is cached with %d resources, want none or the 2 reachable", len(c.res))
	}
	writeReach(t, dpFile, "a")
	s, err := restarted.Load(dpFile, policies)
	must(t, err)
	if got, want := names(s), []string{"a-1", "a-2", "me"}; !slices.Equal(got, want) {
		t.Fatalf("dataplanes %q, want %q", got, want)
	}
	if got := len(restarted.cache.entry(inv).res); got != 2 {
		t.Fatalf("the cache holds %d resources of the inventory, want the 2 reachable", got)
	}
}

// A large file decoded in pieces for a dataplane reaching a few services keeps exactly
// the reachable dataplanes mesh.LoadFile gives, with the same "file#N" sources: each piece
// drops the others as soon as it is decoded, and the numbering still counts them.
func TestLargeFileInPiecesKeepsReachable(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	must(t, os.MkdirAll(policies, 0o755))
	inv := largeInventory(func(i int) string { return fmt.Sprintf("svc%d", i%300) + fmt.Sprintf("-r%d", i/300) })
	// each dataplane's service is its name (extraDataplane): listing two names keeps two
	big := filepath.Join(policies, "inventory.yaml")
	must(t, os.WriteFile(big, []byte(inv), 0o644))
	if n := len(splitPieces([]byte(inv), 4)); n < 2 {
		t.Fatalf("the test file is not cut (%d piece)", n)
	}
	dpFile := filepath.Join(dir, "dp.yaml")
	writeReach(t, dpFile, "svc7-r3", "svc299-r9")
	all, err := mesh.LoadFile(big)
	must(t, err)
	want := map[string]string{}
	for _, r := range all {
		if dp, ok := r.(*mesh.Dataplane); ok && (dp.Name == "svc7-r3" || dp.Name == "svc299-r9") {
			want[dp.Name] = dp.Source.String()
		}
	}
	if len(want) != 2 {
		t.Fatalf("the inventory holds %d of the listed dataplanes, want 2", len(want))
	}
	l := newDirLoader()
	s, err := l.Load(dpFile, policies)
	must(t, err)
	got := map[string]string{}
	for _, dp := range s.Dataplanes {
		if dp.Name != "me" {
			got[dp.Name] = dp.Source.String()
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("kept %v, want %v (name: source)", got, want)
	}
	if n := len(l.cache.entry(big).res); n != 2 {
		t.Fatalf("the cache holds %d resources of the inventory, want the 2 reachable", n)
	}
}

// A file refused while the dataplane's reachable services grow is served at its last good
// version, which was kept for the old list: the dataplanes of the services reachable since
// are not in it. The file is reported so (Narrowed), not as if its whole last good version
// were served; fixed, it gives them.
func TestDirLoaderRefusedFileKeptForAnotherReach(t *testing.T) {
	dpFile, policies := reachMesh(t, t.TempDir(), "a")
	l := newDirLoader()
	_, err := l.Load(dpFile, policies)
	must(t, err)
	inv := filepath.Join(policies, "dataplanes.yaml")
	good, _ := os.ReadFile(inv)
	must(t, os.WriteFile(inv, append([]byte("type: Bogus\nname: x\n---\n"), good...), 0o644))
	refusedOf := func(what string) cplink.RefusedFile {
		t.Helper()
		s, err := l.Load(dpFile, policies)
		var rf *RefusedFiles
		if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 {
			t.Fatalf("%s: %v", what, err)
		}
		return rf.Files[0]
	}
	if f := refusedOf("broken"); !f.Kept || f.Narrowed {
		t.Fatalf("broken: %+v", f)
	}
	writeReach(t, dpFile, "a") // the same list, rewritten: nothing missing
	if f := refusedOf("same list"); !f.Kept || f.Narrowed {
		t.Fatalf("the same list: %+v", f)
	}
	writeReach(t, dpFile, "a", "b")
	if f := refusedOf("widened"); !f.Kept || !f.Narrowed {
		t.Fatalf("widened: %+v, want kept and narrowed", f)
	}
	writeReach(t, dpFile, "a") // back to the list it was kept for: whole again
	if f := refusedOf("back"); !f.Kept || f.Narrowed {
		t.Fatalf("back to the first list: %+v", f)
	}
	writeReach(t, dpFile, "b")
	if f := refusedOf("moved"); !f.Kept || !f.Narrowed {
		t.Fatalf("another list: %+v", f)
	}
	writeReach(t, dpFile, "a") // a-1 and a-2 were dropped for the list of b: not whole
	if f := refusedOf("after b"); !f.Kept || !f.Narrowed {
		t.Fatalf("after the list of b: %+v", f)
	}
	future := time.Now().Add(time.Hour)
	must(t, os.WriteFile(inv, good, 0o644))
	must(t, os.Chtimes(inv, future, future))
	s, err := l.Load(dpFile, policies)
	must(t, err)
	if got, want := names(s), []string{"a-1", "a-2", "me"}; !slices.Equal(got, want) {
		t.Fatalf("fixed: %q, want %q", got, want)
	}
}
