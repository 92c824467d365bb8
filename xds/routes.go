package xds

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/kumadp/kuma-dp/mesh"
)

// route is one TrafficRoute whose sources match this dataplane, ready to apply.
type route struct {
	tr   *mesh.TrafficRoute
	lb   mesh.LoadBalancer // conf.loadBalancer, applied to the clusters of the route's split
	src  mesh.Rank         // best source selector over this dataplane's inbounds
	dsts []mesh.Tags
	conf []dest
	// http are conf.http's rules, compiled (nil for a route without them): used for an
	// outbound to an HTTP service (httproute.go).
	http []httpRule
}

type dest struct {
	tags   mesh.Tags // a service "*" is the service of the outbound (Kuma's route-all)
	weight uint64    // the sum of the uint32 weights of the destinations with these tags
}

// split is where the route sends an outbound's connections to service svc: each
// destination's cluster (named by cluster) and weight, the wildcard service read as svc and
// destinations that then name one cluster added up, in the route's order. Sums are taken
// in 64 bits; when they exceed Envoy's uint32 weights, all are scaled down in proportion.
func (r *route) split(svc string, cluster func(mesh.Tags) string) []weighted {
	return destSplit(r.conf, svc, cluster)
}

// destSplit is route.split for the destinations conf (the route's, or an HTTP rule's).
func destSplit(conf []dest, svc string, cluster func(mesh.Tags) string) []weighted {
	names := make([]string, 0, len(conf))
	sums := make([]uint64, 0, len(conf))
	for _, d := range conf {
		tags := d.tags
		if tags.Value(mesh.ServiceTag) == mesh.Wildcard {
			tags = tags.With(mesh.ServiceTag, svc)
		}
		name := cluster(tags)
		if i := slices.Index(names, name); i >= 0 {
			sums[i] += d.weight
			continue
		}
		names, sums = append(names, name), append(sums, d.weight)
	}
	sums = fitWeights(sums)
	out := make([]weighted, len(names))
	for i, name := range names {
		out[i] = weighted{cluster: name, weight: uint32(sums[i])}
	}
	return out
}

// fitWeights returns ws unchanged when their total fits in a uint32 (Envoy's weights are
// uint32, and its HTTP routes refuse a larger total), else scaled down in proportion so that
// the total does, each weight kept at 1 or more (Envoy refuses 0).
func fitWeights(ws []uint64) []uint64 {
	var total uint64
	for _, w := range ws {
		total += w // each is at most len(conf) * 2^32: no overflow
	}
	if total <= math.MaxUint32 {
		return ws
	}
	// Room for the weights raised to 1 keeps the total within the limit.
	limit := uint64(math.MaxUint32) - uint64(len(ws))
	out := make([]uint64, len(ws))
	for i, w := range ws {
		hi, lo := bits.Mul64(w, limit)
		q, _ := bits.Div64(hi, lo, total) // w <= total, so hi < total
		out[i] = max(q, 1)
	}
	return out
}

// routeIndex finds the best TrafficRoute for an outbound service (the L4 TrafficRoute design, Design step 3).
// Rules whose destination selector is exactly {service: X} are indexed by X; the rest
// (wildcards, extra tags) are checked for every service.
type routeIndex struct {
	byService map[string][]*route
	generic   []*route
	cache     map[string]*route
	// conflicts notes outbounds where two rules ranked equal on specificity and only the
	// creation time (or name) decided (the L4 TrafficRoute design corner cases A, D and F).
	conflicts map[string]string
}

// newRouteIndex keeps the rules whose sources match one of self's inbounds (Design step 2)
// and whose conf can be expressed; the others are reported through problem.
func newRouteIndex(s *mesh.Snapshot, problem func(kind, name, field, msg string)) *routeIndex {
	ix, _ := newRouteIndexCached(s, problem, nil)
	return ix
}

// routeEntry is the outcome of one TrafficRoute for this dataplane: compiled and selected
// (r), not selecting this dataplane (both nil), or refused (err).
type routeEntry struct {
	r   *route
	err *routeError
}

// newRouteIndexCached is newRouteIndex with a cache of outcomes by TrafficRoute (valid while
// this dataplane does not change); it returns the cache for the current routes only.
func newRouteIndexCached(s *mesh.Snapshot, problem func(kind, name, field, msg string), cache map[*mesh.TrafficRoute]routeEntry) (*routeIndex, map[*mesh.TrafficRoute]routeEntry) {
	next := make(map[*mesh.TrafficRoute]routeEntry, len(s.TrafficRoutes))
	ix := &routeIndex{byService: map[string][]*route{}, cache: map[string]*route{}, conflicts: map[string]string{}}
	var inbound []mesh.Tags
	for _, in := range s.Self.Networking.Inbound {
		inbound = append(inbound, normalizeTags(in.Tags))
	}
	for _, tr := range s.TrafficRoutes {
		e, ok := cache[tr]
		if !ok {
			e = selectRoute(tr, inbound)
		}
		next[tr] = e
		if e.err != nil {
			problem(mesh.KindTrafficRoute, tr.Name, e.err.field, e.err.msg)
			continue
		}
		r := e.r
		if r == nil {
			continue
		}
		generic := false
		for _, d := range r.dsts {
			svc := d.Value(mesh.ServiceTag)
			if len(d) != 1 || svc == "" || svc == mesh.Wildcard {
				generic = true
			}
		}
		if generic {
			ix.generic = append(ix.generic, r)
			continue
		}
		for i, d := range r.dsts {
			svc := d.Value(mesh.ServiceTag)
			dup := false
			for _, prev := range r.dsts[:i] {
				dup = dup || prev.Value(mesh.ServiceTag) == svc
			}
			if !dup {
				ix.byService[svc] = append(ix.byService[svc], r)
			}
		}
	}
	return ix, next
}

// selectRoute compiles tr and ranks its best source selector against this dataplane's
// inbound tags (the L4 TrafficRoute design, Design step 2).
func selectRoute(tr *mesh.TrafficRoute, inbound []mesh.Tags) routeEntry {
	r, err := compileRoute(tr)
	if err != nil {
		return routeEntry{err: err}
	}
	found := false
	for _, tags := range inbound {
		for _, sel := range tr.Sources {
			m := normalizeTags(sel.Match)
			if !m.Matches(tags) {
				continue
			}
			rk := mesh.RankOf(m, tr.CreationTime(), tr.Name)
			if !found || rk.Better(r.src) {
				r.src, found = rk, true
			}
		}
	}
	if !found {
		return routeEntry{}
	}
	return routeEntry{r: r}
}

type routeError struct{ field, msg string }

// compileRoute checks what the generator relies on and normalizes the tags. Weight-0
// destinations take no traffic and are dropped; a rule left with none is an error.
func compileRoute(tr *mesh.TrafficRoute) (*route, *routeError) {
	r := &route{tr: tr, lb: mesh.ParseLoadBalancer(tr.LoadBalancer)}
	if len(tr.Sources) == 0 {
		return nil, &routeError{"sources", "at least one source selector is required"}
	}
	if len(tr.Destinations) == 0 {
		return nil, &routeError{"destinations", "at least one destination selector is required"}
	}
	for _, d := range tr.Destinations {
		r.dsts = append(r.dsts, normalizeTags(d.Match))
	}
	conf, err := compileDests("conf", tr.Conf)
	if err != nil {
		return nil, err
	}
	r.conf = conf
	if len(tr.HTTP) > 0 { // `http: []` is no rules
		if r.http, err = compileHTTP(tr.HTTP); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// compileDests normalizes the weighted destinations at path (conf, or an HTTP rule's
// split); destinations with the same tags are one, their weights added up.
func compileDests(path string, ds []mesh.WeightedDestination) ([]dest, *routeError) {
	var out []dest
	index := map[string]int{}
	for i, c := range ds {
		tags := normalizeTags(c.Destination)
		svc := tags.Value(mesh.ServiceTag)
		if svc == "" {
			return nil, &routeError{fmt.Sprintf("%s[%d].destination", path, i), "needs a kuma.io/service (or service) tag"}
		}
		for _, tg := range tags {
			if k, v := tg.Key, tg.Value; (v == mesh.Wildcard && k != mesh.ServiceTag) || v == "" {
				return nil, &routeError{fmt.Sprintf("%s[%d].destination.%s", path, i, k), fmt.Sprintf("destination tags need exact values (value %q)", v)}
			}
		}
		if c.Weight == 0 {
			continue
		}
		// Two destinations with the same tags are one cluster: their weights add up.
		name := clusterName(tags)
		if j, ok := index[name]; ok {
			out[j].weight += uint64(c.Weight)
			continue
		}
		index[name] = len(out)
		out = append(out, dest{tags: tags, weight: uint64(c.Weight)})
	}
	if len(out) == 0 {
		return nil, &routeError{path, "no destination with a weight above 0"}
	}
	return out, nil
}

// best returns the best rule for an outbound to service svc, or nil. The rank of a rule is
// its best source selector plus its best destination selector matching {service: svc}:
// more tags, then more exact values, then the newest, then the lowest name
// (mesh.Rank.Better), which settles the L4 TrafficRoute design's corner cases A-D and F.
func (ix *routeIndex) best(svc string) *route {
	if r, ok := ix.cache[svc]; ok {
		return r
	}
	target := mesh.Tags{{Key: mesh.ServiceTag, Value: svc}}
	var best, tied *route
	var bestRank mesh.Rank
	consider := func(r *route) {
		var dst mesh.Rank
		found := false
		for _, d := range r.dsts {
			if !d.Matches(target) {
				continue
			}
			rk := mesh.RankOf(d, r.tr.CreationTime(), r.tr.Name)
			if !found || rk.Better(dst) {
				dst, found = rk, true
			}
		}
		if !found {
			return
		}
		rk := mesh.Rank{Tags: r.src.Tags + dst.Tags, Exact: r.src.Exact + dst.Exact, Created: r.tr.CreationTime(), Name: r.tr.Name}
		switch {
		case best == nil:
			best, bestRank = r, rk
		case rk.Better(bestRank):
			if rk.Tags == bestRank.Tags && rk.Exact == bestRank.Exact {
				tied = best
			} else {
				tied = nil
			}
			best, bestRank = r, rk
		case rk.Tags == bestRank.Tags && rk.Exact == bestRank.Exact:
			tied = r
		}
	}
	for _, r := range ix.byService[svc] {
		consider(r)
	}
	for _, r := range ix.generic {
		consider(r)
	}
	if tied != nil {
		ix.conflicts[svc] = fmt.Sprintf("outbound to %q: TrafficRoutes %q and %q match equally well; %q wins (newest, then lowest name)",
			svc, best.tr.Name, tied.tr.Name, best.tr.Name)
	}
	ix.cache[svc] = best
	return best
}

// sortedKeys is used by tests and the golden writer.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
