package xds

import (
	"errors"
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

// xrefIndex is what the cross-reference checks of a validated Resources found; the next
// Resources of the same Generator updates it with its changes instead of rebuilding it.
type xrefIndex struct {
	lrefs    map[string][]string // listener -> clusters it names
	refCount map[string]int      // cluster -> references from listeners
	clusters map[string]bool     // cluster -> is EDS
	cla      map[string]bool
	bound    map[string]string // "ip:port" -> bound listener
	boundBy  map[string]string // bound listener -> "ip:port"
}

func newXrefIndex(listeners, clusters int) *xrefIndex {
	return &xrefIndex{
		lrefs: make(map[string][]string, listeners), refCount: make(map[string]int, clusters),
		clusters: make(map[string]bool, clusters), cla: make(map[string]bool, clusters),
		boundBy: map[string]string{},
	}
}

// resDelta says how a Generator's Resources differ from the previous ones: the changed
// names of each type with their new message, nil when removed.
type resDelta struct {
	base      *Resources
	listeners map[string]*listener.Listener
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
}

// validateDelta checks only what changed since the (validated) base: the new messages, and
// the references that involve a changed name. It takes over the base's index.
func (r *Resources) validateDelta() error {
	d := r.delta
	if c := d.base.checked.Load(); c == nil || c.err != nil {
		return errors.New("base not validated")
	}
	idx := d.base.idx.Swap(nil)
	if idx == nil {
		return errors.New("base index in use")
	}
	var errs []error
	check := r.checker(&errs)
	touched := map[string]bool{}
	for name, l := range d.listeners {
		if refs, ok := idx.lrefs[name]; ok {
			for _, c := range refs {
				idx.refCount[c]--
			}
			delete(idx.lrefs, name)
			if key, ok := idx.boundBy[name]; ok {
				delete(idx.bound, key)
				delete(idx.boundBy, name)
			}
		}
		if l == nil {
			continue
		}
		refs := check("listener", name, l)
		idx.lrefs[name] = refs
		for _, c := range refs {
			idx.refCount[c]++
			touched[c] = true
		}
		if key, ok := boundAddress(l); ok {
			if other, dup := idx.bound[key]; dup {
				errs = append(errs, fmt.Errorf("listener %q: binds %s like listener %q", name, key, other))
			}
			idx.bound[key], idx.boundBy[name] = name, key
		}
	}
	for name, c := range d.clusters {
		touched[name] = true
		delete(idx.clusters, name)
		if c != nil {
			idx.clusters[name] = c.GetType() == cluster.Cluster_EDS
			check("cluster", name, c)
		}
	}
	for name, e := range d.endpoints {
		touched[name] = true
		delete(idx.cla, name)
		if e != nil {
			idx.cla[name] = true
			check("cluster load assignment", name, e)
		}
	}
	for c := range touched {
		eds, exists := idx.clusters[c]
		if idx.refCount[c] > 0 && !exists {
			errs = append(errs, fmt.Errorf("listener %q: tcp_proxy names cluster %q, which does not exist", idx.firstUser(c), c))
		}
		if eds && !idx.cla[c] {
			errs = append(errs, fmt.Errorf("cluster %q: EDS cluster without a cluster load assignment", c))
		}
		if idx.cla[c] && !eds {
			errs = append(errs, fmt.Errorf("cluster load assignment %q: no EDS cluster of that name", c))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	r.idx.Store(idx)
	return nil
}

// firstUser is the lowest-named listener naming cluster c (for error messages).
func (x *xrefIndex) firstUser(c string) string {
	best := ""
	for l, refs := range x.lrefs {
		for _, r := range refs {
			if r == c && (best == "" || l < best) {
				best = l
			}
		}
	}
	return best
}
