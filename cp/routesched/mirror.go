package routesched

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// mirror holds the routers, routes and bindings as a pass listed them, kept up to date by
// the watch that follows the pass: the passes run on a watched change read it instead of
// listing the store again (20,000 keys for 10,000 bound routes, most of a pass's time). A
// pass acting on a mirror behind the store is no less safe than one acting on a list: every
// write it makes is compared on the versions it read.
//
// A pass's own writes (bindings made, admission written) come back through the watch too:
// they are applied, but call for no pass of their own - the pass that wrote them already
// acted on them (a pass after its bindings found nothing to do, at 10,000 routes bound as
// costly as the pass that bound them).
type mirror struct {
	items map[store.Key]store.Item
	ours  map[store.Key]string // documents this reconciler wrote, until the watch shows them
	// dirty: the keys changed since the last pass took them (this reconciler's writes too:
	// the next pass sees them bound, or their admission written).
	dirty map[store.Key]struct{}
	// echo: the version at which the watch showed a document this reconciler wrote, until a
	// pass takes it (takeEcho).
	echo map[store.Key]int64
	// decoded: the documents this reconciler wrote as it encoded them, once the watch shows
	// them (their version known), until the pass decodes them (decodedAt): after a pass
	// bound 10,000 routes, the next need not decode 20,000 documents it wrote itself.
	decoded map[store.Key]cached
	resOf   map[store.Key]mesh.Resource // of ours: the resources written, until the watch shows them
	// deleted: while a listing is read beside the passes, the keys deleted and when.
	deleted map[store.Key]int64
	// routerKeys: the routers' keys among items.
	routerKeys map[store.Key]struct{}
}

func newMirror(lists ...[]store.Item) *mirror {
	m := &mirror{items: map[store.Key]store.Item{}, ours: map[store.Key]string{}, dirty: map[store.Key]struct{}{}, echo: map[store.Key]int64{},
		decoded: map[store.Key]cached{}, resOf: map[store.Key]mesh.Resource{}, routerKeys: map[store.Key]struct{}{}}
	for _, l := range lists {
		for _, it := range l {
			m.set(it)
		}
	}
	return m
}

// wrote records a document the reconciler wrote under k.
func (m *mirror) wrote(k store.Key, doc []byte) {
	if m != nil {
		m.ours[k] = string(doc)
		delete(m.resOf, k)
	}
}

// wroteDecoded records a document the reconciler wrote under k, and res, the resource it
// encoded (as decoding the document gives it: a route with its store creation time).
func (m *mirror) wroteDecoded(k store.Key, doc []byte, res mesh.Resource) {
	if m != nil {
		m.ours[k] = string(doc)
		m.resOf[k] = res
	}
}

// decodedAt is the resource under k at version as this reconciler wrote it (and forgets it).
func (m *mirror) decodedAt(k store.Key, version int64) (mesh.Resource, bool) {
	if m == nil {
		return nil, false
	}
	c, ok := m.decoded[k]
	if ok {
		delete(m.decoded, k)
	}
	return c.res, ok && c.version == version
}

// routingKind says whether kind is one a pass reads.
func routingKind(kind string) bool {
	return kind == mesh.KindRouter || kind == mesh.KindRoute || kind == mesh.KindRouteBinding
}

// apply applies a watched change of a router, route or binding; one the mirror already
// holds (the watch starts at the first list's revision, the others were read later) or of
// another kind is ignored. It says whether the change calls for a pass: the mirror changed,
// and not by a write of this reconciler.
func (m *mirror) apply(e store.Event) bool {
	if !routingKind(e.Item.Type) {
		return false
	}
	k := e.Item.Key
	have, held := m.items[k]
	switch e.Type {
	case store.Put:
		if held && have.Version >= e.Item.Version {
			return false
		}
		m.set(e.Item)
		m.dirty[k] = struct{}{}
		delete(m.echo, k)
		delete(m.decoded, k)
		if doc, ok := m.ours[k]; ok {
			res, decoded := m.resOf[k]
			delete(m.ours, k)
			delete(m.resOf, k)
			if doc == string(e.Item.Doc) {
				m.echo[k] = e.Item.Version
				if decoded {
					m.decoded[k] = cached{version: e.Item.Version, res: res}
				}
				return false
			}
			return true
		}
	case store.Delete:
		delete(m.ours, k)
		delete(m.resOf, k)
		if !held || have.Version >= e.Revision {
			return false
		}
		m.remove(k)
		m.dirty[k] = struct{}{}
		if m.deleted != nil {
			m.deleted[k] = e.Revision
		}
		delete(m.echo, k)
		delete(m.decoded, k)
		delete(m.resOf, k)
	default:
		return false
	}
	return true
}

// pending says whether a document this reconciler wrote under k is not shown by the watch
// yet (what the mirror holds of k is older).
func (m *mirror) pending(k store.Key) bool {
	_, ok := m.ours[k]
	return ok
}

// isEcho says whether the document under k at version is one this reconciler wrote.
func (m *mirror) isEcho(k store.Key, version int64) bool {
	v, ok := m.echo[k]
	return ok && v == version
}

// takeEcho says whether the document under k at version is one this reconciler wrote (and
// forgets it).
func (m *mirror) takeEcho(k store.Key, version int64) bool {
	v, ok := m.echo[k]
	delete(m.echo, k)
	return ok && v == version
}

// takeDirty returns the keys changed since the last call.
func (m *mirror) takeDirty() map[store.Key]struct{} {
	d := m.dirty
	m.dirty = map[store.Key]struct{}{}
	return d
}

func (m *mirror) set(it store.Item) {
	m.items[it.Key] = it
	if it.Type == mesh.KindRouter {
		m.routerKeys[it.Key] = struct{}{}
	}
}

func (m *mirror) remove(k store.Key) {
	delete(m.items, k)
	delete(m.routerKeys, k)
}

// routers are the mirror's routers, by key.
func (m *mirror) routers() []store.Item {
	out := make([]store.Item, 0, len(m.routerKeys))
	for k := range m.routerKeys {
		out = append(out, m.items[k])
	}
	sortByKey(out)
	return out
}

// lists are the mirror's routers (by key), routes and bindings.
func (m *mirror) lists() (routers, routes, bindings []store.Item) {
	routes = make([]store.Item, 0, len(m.items)/2+1)
	bindings = make([]store.Item, 0, len(m.items)/2+1)
	for _, it := range m.items {
		switch it.Type {
		case mesh.KindRouter:
			routers = append(routers, it)
		case mesh.KindRoute:
			routes = append(routes, it)
		case mesh.KindRouteBinding:
			bindings = append(bindings, it)
		}
	}
	sortByKey(routers)
	return routers, routes, bindings
}

func sortByKey(items []store.Item) {
	slices.SortFunc(items, func(a, b store.Item) int {
		return cmp.Or(strings.Compare(a.Mesh, b.Mesh), strings.Compare(a.Name, b.Name))
	})
}
