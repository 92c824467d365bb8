package mesh

import (
	"runtime"
	"strconv"
	"testing"
)

// The snapshot hash is computed in chunks on every core: it must still see every resource
// and their order, and not depend on the number of cores.
func TestSnapshotHashLarge(t *testing.T) {
	build := func(edit func(dps []Resource)) string {
		self := &Dataplane{Meta: Meta{Name: "self", Mesh: "default"}}
		var rs []Resource
		for i := range 3*hashChunk + 7 {
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
		"an address in chunk 2": func(rs []Resource) { rs[hashChunk+3].(*Dataplane).Networking.Address = "10.0.0.2" },
		"two names swapped": func(rs []Resource) {
			a, b := rs[5].(*Dataplane), rs[hashChunk*2].(*Dataplane)
			a.Networking.Inbound, b.Networking.Inbound = b.Networking.Inbound, a.Networking.Inbound
		},
	} {
		if got := build(edit); got == base {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}
