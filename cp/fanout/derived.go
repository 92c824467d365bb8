package fanout

import (
	"bytes"
	"maps"
	"slices"

	"github.com/kumadp/kuma-dp/mesh"
)

// Derived documents are computed by the control plane rather than read from the store: the
// zones of its DNS for router shards (DNSZone), which depend on which gateway agents are
// connected. They are served beside the store's resources, to every mesh; the store's own
// documents of a derived kind are never served.

// DerivedKinds are the kinds only the control plane produces (mesh's list: the decoding of
// users' documents refuses them).
var DerivedKinds = mesh.DerivedKinds

// SetDerived serves docs as every document of kind (one of DerivedKinds), replacing what was
// served of it; agents get only what changed. Before the store is first read they wait and
// are served with it.
func (f *Feed) SetDerived(kind string, docs []Doc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.derived == nil {
		f.derived = map[string][]Doc{}
	}
	if old, had := f.derived[kind]; had && slices.EqualFunc(old, docs, func(a, b Doc) bool {
		return a.Name == b.Name && a.Mesh == b.Mesh && a.Meshless == b.Meshless && bytes.Equal(a.Body, b.Body)
	}) {
		return // nothing changed: agents are sent nothing
	}
	f.derived[kind] = slices.Clone(docs)
	if f.haveStore {
		f.cp.Apply(f.withDerivedLocked())
	}
}

// applyStore serves what the store holds (sv) with the derived documents beside it.
func (f *Feed) applyStore(sv Served) (updated, removed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fromStore, f.haveStore = sv, true
	return f.cp.Apply(f.withDerivedLocked())
}

// withDerivedLocked is the store's Served with the derived documents put in: the store's
// maps are shared, never written (a derived kind gets fresh maps).
func (f *Feed) withDerivedLocked() Served {
	if len(f.derived) == 0 {
		return f.fromStore
	}
	out := Served{meshes: maps.Clone(f.fromStore.meshes), global: maps.Clone(f.fromStore.global)}
	for kind, docs := range f.derived {
		delete(out.global, kind)
		for m, byKind := range out.meshes {
			if _, ok := byKind[kind]; ok {
				byKind = maps.Clone(byKind)
				delete(byKind, kind)
				out.meshes[m] = byKind
			}
		}
		for _, d := range docs {
			if !d.Meshless {
				if byKind := out.meshes[d.Mesh]; byKind != nil {
					out.meshes[d.Mesh] = maps.Clone(byKind)
				}
			}
			out.Put(d)
		}
	}
	return out
}
