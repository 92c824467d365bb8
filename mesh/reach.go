package mesh

import (
	"slices"
	"strings"
)

// Reach is what a dataplane's networking.transparentProxying.reachableServices lists: the
// services it talks to (Kuma's reachable services). The agent then keeps only the
// dataplanes of those services, so that names, VIPs, Envoy's clusters and the memory they
// take follow what the dataplane reaches, not the size of the mesh. A nil Reach (no list,
// or an empty one) reaches every service.
type Reach struct {
	self     string   // the dataplane's name: it always keeps itself
	services []string // sorted, each once
}

// ReachOf is self's Reach (nil when self is nil or lists no reachable service).
func ReachOf(self *Dataplane) *Reach {
	if self == nil {
		return nil
	}
	tp := self.Networking.TransparentProxying()
	if tp == nil || len(tp.ReachableServices) == 0 {
		return nil
	}
	s := slices.Clone(tp.ReachableServices)
	slices.Sort(s)
	return &Reach{self: self.Name, services: slices.Compact(s)}
}

// Key is r as text, equal for equal sets ("" for every service).
func (r *Reach) Key() string {
	if r == nil {
		return ""
	}
	return strings.Join(r.services, "\n")
}

// Keeps reports whether dp is kept: every dataplane when r is nil, otherwise the dataplane
// itself and those with an inbound of a reachable service (its kuma.io/service).
func (r *Reach) Keeps(dp *Dataplane) bool {
	if r == nil || dp.Name == r.self {
		return true
	}
	for i := range dp.Networking.Inbound {
		if svc, ok := dp.Networking.Inbound[i].Tags.Get(ServiceTag); ok {
			if _, found := slices.BinarySearch(r.services, svc); found {
				return true
			}
		}
	}
	return false
}

// Filter returns rs without the dataplanes r does not keep (rs itself when it keeps all;
// otherwise a new slice: rs is never modified). Other kinds are always kept.
func (r *Reach) Filter(rs []Resource) []Resource {
	if r == nil {
		return rs
	}
	drop := func(res Resource) bool {
		dp, ok := res.(*Dataplane)
		return ok && !r.Keeps(dp)
	}
	if !slices.ContainsFunc(rs, drop) {
		return rs
	}
	out := make([]Resource, 0, len(rs))
	for _, res := range rs {
		if !drop(res) {
			out = append(out, res)
		}
	}
	return slices.Clip(out)
}
