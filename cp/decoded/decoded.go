// Package decoded decodes the store's documents for a replica's followers of the store - the
// agents' feed (cp/fanout), the routers' zones (cp/shardzones) and, on the leader, the
// routers' status (cp/routerstatus) - with the agents' own decoder (mesh.Decode): a document
// of a list they share (store.SharedLists) is decoded once for all of them, by the first to
// take it, and dropped once each has taken or passed it (store.Shared). What it returns is
// theirs together: read it, or Copy it to change it.
package decoded

import (
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// decodes counts the documents decoded here (Count).
var decodes atomic.Int64

// Count is how many stored documents this process has decoded here.
func Count() int64 { return decodes.Load() }

type result struct {
	rs  []mesh.Resource
	err error
}

func decode(it store.Item) result {
	decodes.Add(1)
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	return result{rs, err}
}

// Resources is it's document decoded, shared with the other readers of its list.
func Resources(it store.Item) ([]mesh.Resource, error) {
	r := store.Shared(it, decode)
	return r.rs, r.err
}

// Pass says this reader does not take it (store.Pass).
func Pass(it store.Item) { store.Pass(it) }

// One is it's one resource, shared with the other readers of its list (Copy it to change
// it). The error says why not: it does not decode, or holds several resources.
func One(it store.Item) (mesh.Resource, error) {
	rs, err := Resources(it)
	if err == nil && len(rs) != 1 {
		err = fmt.Errorf("%d resources in one stored document, want 1", len(rs))
	}
	if err != nil {
		return nil, fmt.Errorf("does not decode: %w", err)
	}
	return rs[0], nil
}

// As is it's one resource, of the kind T its key names, in its key's mesh (a document
// naming another, stored by hand, is taken as its key says: a copy). The error says why not:
// it does not decode, holds several resources, or another kind.
func As[T mesh.Resource](it store.Item) (T, error) {
	var zero T
	one, err := One(it)
	if err != nil {
		return zero, err
	}
	r, ok := one.(T)
	if !ok {
		return zero, fmt.Errorf("a %s, not of its key's kind %s", one.Kind(), it.Type)
	}
	if r.GetMeta().Mesh != it.Mesh {
		r = Copy(r)
		r.GetMeta().Mesh = it.Mesh
	}
	return r, nil
}

// Copy is a shallow copy of r (a pointer to a struct, as every resource of package mesh):
// its fields, its Meta's included, can be set without changing r; what they point to is
// still shared.
func Copy[T mesh.Resource](r T) T {
	v := reflect.ValueOf(r).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	return c.Interface().(T)
}
