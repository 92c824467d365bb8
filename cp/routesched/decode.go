package routesched

import (
	"fmt"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// cached is a decoded resource at one version: a pass decodes only what changed.
type cached struct {
	version int64
	res     mesh.Resource
	err     error
}

// decode decodes a stored resource, from the cache when its version is unchanged. Routes
// get the store's creation time. The result must not be modified.
func (rc *Reconciler) decode(it store.Item) (mesh.Resource, error) {
	if c, ok := rc.cache[it.Key]; ok && c.version == it.Version {
		return c.res, c.err
	}
	if res, ok := rc.mirror.decodedAt(it.Key, it.Version); ok {
		rc.cache[it.Key] = cached{it.Version, res, nil}
		return res, nil
	}
	var res mesh.Resource
	var err error
	if it.Type == mesh.KindRoute {
		var r *mesh.Route
		if r, err = DecodeRoute(it); err == nil {
			res = r
		}
	} else {
		var rs []mesh.Resource
		rs, err = mesh.Decode(it.Key.String(), it.Doc)
		if err == nil && len(rs) != 1 {
			err = fmt.Errorf("%s: want one resource, got %d", it.Key, len(rs))
		}
		if err == nil {
			res = rs[0]
		}
	}
	rc.cache[it.Key] = cached{it.Version, res, err}
	return res, err
}
