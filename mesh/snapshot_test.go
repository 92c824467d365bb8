package mesh

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

// The snapshot hash is computed in chunks on every core: it must still see every resource
// and their order, and not depend on the number of cores.
func TestSnapshotHashLarge(t *testing.T) {
	build := func(edit func(dps []Resource)) string {
		self := &Dataplane{Meta: Meta{Name: "self", Mesh: "default"}}
		var rs []Resource
		for i := range 3*stretchMax + 7 {
			rs = append(rs, &Dataplane{Meta: Meta{Name: "dp-" + strconv.Itoa(100000+i), Mesh: "default"},
				Networking: Networking{Address: "10.0.0.1", Inbound: []Inbound{{Port: 80, Tags: TagsOf(map[string]string{ServiceTag: "s" + strconv.Itoa(i)})}}}})
		}
		if edit != nil {
			edit(rs)
		}
		s, err := NewSnapshot(self, rs)
		if err != nil {
			t.Fatal(err)
		}
		return s.Hash
	}
	base := build(nil)
	if again := build(nil); again != base {
		t.Fatalf("same content, hashes %s and %s", base, again)
	}
	func() {
		procs := runtime.GOMAXPROCS(1)
		defer runtime.GOMAXPROCS(procs)
		if one := build(nil); one != base {
			t.Fatalf("same content, hash %s on one core and %s on %d", one, base, procs)
		}
	}()
	for name, edit := range map[string]func([]Resource){
		"a tag in the last chunk": func(rs []Resource) {
			in := &rs[len(rs)-1].(*Dataplane).Networking.Inbound[0]
			in.Tags = in.Tags.With("version", "v2")
		},
		"an address in the middle": func(rs []Resource) { rs[stretchMax+3].(*Dataplane).Networking.Address = "10.0.0.2" },
		"two names swapped": func(rs []Resource) {
			a, b := rs[5].(*Dataplane), rs[stretchMax*2].(*Dataplane)
			a.Networking.Inbound, b.Networking.Inbound = b.Networking.Inbound, a.Networking.Inbound
		},
	} {
		if got := build(edit); got == base {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}

// largeMesh returns n one-inbound dataplanes named in order, each a new object.
func largeMesh(n int) []Resource {
	rs := make([]Resource, 0, n)
	for i := range n {
		rs = append(rs, benchDataplane(i, "10.0.0.1"))
	}
	return rs
}

func benchDataplane(i int, addr string) *Dataplane {
	return &Dataplane{Meta: Meta{Name: "dp-" + strconv.Itoa(100000+i), Mesh: "default"},
		Networking: Networking{Address: addr, Inbound: []Inbound{{Port: 80, Tags: TagsOf(map[string]string{ServiceTag: "s" + strconv.Itoa(i)})}}}}
}

// A builder hashes again only the stretches whose resources changed, and its hash is the
// one a fresh NewSnapshot gives for the same content, through a series of changes: one
// resource edited (a new object), one added, one removed, one renamed, nothing changed,
// and the same content as new objects.
func TestSnapshotBuilderHashesWhatChanged(t *testing.T) {
	self := &Dataplane{Meta: Meta{Name: "self", Mesh: "default"}}
	rs := largeMesh(20 * stretchMean)
	var b SnapshotBuilder
	build := func(what string, maxHashed int) {
		t.Helper()
		got, err := b.Build(self, rs)
		if err != nil {
			t.Fatal(err)
		}
		hashed := b.hashed
		want, err := NewSnapshot(self, slices.Clone(rs))
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash {
			t.Fatalf("%s: the builder's hash %s, a fresh snapshot's %s", what, got.Hash, want.Hash)
		}
		if hashed > maxHashed {
			t.Fatalf("%s: %d stretches hashed again, want at most %d", what, hashed, maxHashed)
		}
	}
	build("first", 1<<30)
	if b.hashed < 10 {
		t.Fatalf("the first build hashed %d stretches: the mesh should cut into ~20", b.hashed)
	}
	build("nothing changed", 0)
	rs[100] = benchDataplane(100, "10.0.0.2")
	build("one dataplane edited", 1)
	rs = append(rs, benchDataplane(len(rs)+5, "10.0.0.3"))
	build("one dataplane added", 2)
	rs = slices.Delete(rs, 2000, 2001)
	build("one dataplane removed", 2)
	renamed := *rs[3000].(*Dataplane)
	renamed.Name = "zz-renamed"
	rs[3000] = &renamed
	build("one dataplane renamed", 4)
	fresh := largeMesh(20 * stretchMean)
	copy(rs, fresh) // equal content in new objects, but for the edits above
	rs = fresh
	build("the same mesh as new objects", 1<<30)
}

// BenchmarkSnapshotOneChange100k is the cost of a snapshot after one dataplane changed in a
// mesh of 100,000: with a builder (what the sources use) and without (every resource hashed).
func BenchmarkSnapshotOneChange100k(b *testing.B) {
	self := &Dataplane{Meta: Meta{Name: "self", Mesh: "default"}}
	ordered := largeMesh(100000)
	// the control-plane link hands its resources in no order (a map's)
	shuffled := slices.Clone(ordered)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	var builder, shuffledBuilder SnapshotBuilder
	for _, c := range []struct {
		name  string
		rs    []Resource
		build func([]Resource) (*Snapshot, error)
	}{
		{"builder", ordered, func(rs []Resource) (*Snapshot, error) { return builder.Build(self, rs) }},
		{"builder,unordered", shuffled, func(rs []Resource) (*Snapshot, error) { return shuffledBuilder.Build(self, rs) }},
		{"fresh", ordered, func(rs []Resource) (*Snapshot, error) { return NewSnapshot(self, rs) }},
	} {
		rs := c.rs
		b.Run(c.name, func(b *testing.B) {
			if _, err := c.build(rs); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				d := *rs[50000].(*Dataplane) // a new object, the same name
				d.Networking.Address = "10.1.0." + strconv.Itoa(i%250)
				rs[50000] = &d
				if _, err := c.build(rs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
