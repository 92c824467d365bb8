package routesched

import (
	"context"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// listing is the store's routers, routes and bindings as listed beside the passes, each
// list with the store revision it was read at.
type listing struct {
	lists [3][]store.Item
	revs  [3]int64
	err   error
}

var listedKinds = [3]string{mesh.KindRouter, mesh.KindRoute, mesh.KindRouteBinding}

// relist lists the store in the background; the listing arrives on the channel returned.
// The mirror keeps the deletions it applies meanwhile (a key absent from the listing and
// from the mirror was deleted after the listing, or is a deletion the watch missed).
func (rc *Reconciler) relist(ctx context.Context) <-chan *listing {
	out := make(chan *listing, 1)
	rc.mirror.deleted = map[store.Key]int64{}
	go func() {
		l := &listing{}
		for i, kind := range listedKinds {
			l.lists[i], l.revs[i], l.err = listAll(ctx, rc.Store, kind)
			if l.err != nil {
				break
			}
		}
		out <- l
	}()
	return out
}

// repair makes the mirror hold what the listing shows and the watch did not: a version
// newer than the mirror's, a key the mirror lacks (not deleted since), a key the listing
// lacks that the mirror held before it; each is a change for the next pass. It returns how
// many there were (none while the watch holds).
func (m *mirror) repair(l *listing) int {
	n := 0
	deleted := m.deleted
	m.deleted = nil
	for i, list := range l.lists {
		listed := make(map[store.Key]bool, len(list))
		for _, it := range list {
			listed[it.Key] = true
			have, held := m.items[it.Key]
			if held && have.Version >= it.Version || !held && deleted[it.Key] >= it.Version {
				continue
			}
			m.set(it)
			m.dirty[it.Key] = struct{}{}
			n++
		}
		for k, it := range m.items {
			if k.Type == listedKinds[i] && !listed[k] && it.Version <= l.revs[i] {
				m.remove(k)
				m.dirty[k] = struct{}{}
				n++
			}
		}
	}
	return n
}
