package xds

import (
	"maps"
	"reflect"
	"slices"
	"sort"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// genState is what a Generator keeps between calls so that a change to TrafficRoutes or to
// other dataplanes regenerates only the outbounds it affects. Any other change (this
// dataplane, the VIP table, MeshExternalServices, options) regenerates everything.
type genState struct {
	snap  *mesh.Snapshot
	table *vipalloc.Table
	opts  Options
	res   *Resources

	listeners map[string]*listener.Listener
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
	byService map[string][]inboundRef
	dps       map[string]*mesh.Dataplane // by name
	svcDPs    map[string][]string        // service -> names of the dataplanes serving it, sorted

	// obs: outbound service -> its outbounds; uses: outbound service -> clusters its
	// listeners name; users: cluster -> outbound services naming it; dest: cluster -> the
	// service whose endpoints it holds.
	obs   map[string][]obRef
	uses  map[string][]string
	users map[string]map[string]bool
	dest  map[string]string

	conflicts     map[string]string
	otherProblems []Problem
	memo          map[memoKey]memoEntry
	// routes caches each TrafficRoute's outcome for this dataplane; destClusters lists the
	// clusters holding each destination service's endpoints.
	routes       map[*mesh.TrafficRoute]routeEntry
	destClusters map[string][]string
}

// obRef is one outbound: a VIP outbound of the table or an entry of networking.outbound.
type obRef struct {
	vip  *vipalloc.Outbound
	self int
}

// track records that outbound service svc uses the clusters of spec.
func (g *generator) track(svc string, spec proxySpec) {
	st := g.st
	if st == nil {
		return
	}
	add := func(c string) {
		st.uses[svc] = append(st.uses[svc], c)
		if st.users[c] == nil {
			st.users[c] = map[string]bool{}
		}
		st.users[c][svc] = true
	}
	if spec.single != "" {
		add(spec.single)
	}
	for _, w := range spec.split {
		add(w.cluster)
	}
	if spec.http != nil {
		for _, ws := range spec.http.splits {
			for _, w := range ws {
				add(w.cluster)
			}
		}
	}
}

// newState records a full generation.
func newState(g *generator, r *Resources, routeProblems int) *genState {
	st := g.st
	st.snap, st.table, st.opts, st.res = g.s, g.t, g.o, r
	st.listeners, st.clusters, st.endpoints, st.byService = g.listeners, g.clusters, g.endpoints, g.byService
	st.dps = make(map[string]*mesh.Dataplane, len(g.s.Dataplanes))
	st.svcDPs = map[string][]string{}
	for _, dp := range g.s.Dataplanes {
		st.dps[dp.Name] = dp
		for _, svc := range dpServices(dp) {
			st.svcDPs[svc] = append(st.svcDPs[svc], dp.Name)
		}
	}
	st.obs = map[string][]obRef{}
	outs := g.t.Outbounds()
	for i := range outs {
		if outs[i].MeshExternalService == "" {
			svc := normalizeTags(outs[i].Tags).Value(mesh.ServiceTag)
			st.obs[svc] = append(st.obs[svc], obRef{vip: &outs[i], self: -1})
		}
	}
	if !g.o.TransparentProxy {
		st.obs = map[string][]obRef{} // no VIP listeners were generated
	}
	for i, ob := range g.s.Self.Networking.Outbound() {
		if ob.BackendRef == nil && !g.selfSkipped[i] { // one left out stays out until this dataplane changes
			svc := normalizeTags(ob.Tags).Value(mesh.ServiceTag)
			st.obs[svc] = append(st.obs[svc], obRef{self: i})
		}
	}
	st.conflicts = maps.Clone(g.routes.conflicts)
	st.otherProblems = slices.Clone(g.problems[routeProblems:])
	st.memo = g.next
	st.routes = map[*mesh.TrafficRoute]routeEntry{}
	return st
}

func newTracking() *genState {
	return &genState{uses: map[string][]string{}, users: map[string]map[string]bool{}, dest: map[string]string{},
		destClusters: map[string][]string{}}
}

// dpServices are the distinct services of a dataplane's inbounds.
func dpServices(dp *mesh.Dataplane) []string {
	var out []string
	for _, in := range dp.Networking.Inbound {
		if svc := normalizeTags(in.Tags).Value(mesh.ServiceTag); svc != "" && !slices.Contains(out, svc) {
			out = append(out, svc)
		}
	}
	return out
}

// incremental applies s to the previous state when only TrafficRoutes and other dataplanes
// changed; false when a full generation is needed.
func (st *genState) incremental(s *mesh.Snapshot, t *vipalloc.Table, o Options, trust *trustStore) (*Resources, bool) {
	if !st.patchable(s, t, o) {
		return nil, false
	}
	ch, ok := st.changesTo(s)
	if !ok {
		return nil, false
	}
	g := newGeneratorFrom(st, s, t, o)
	st.patchMembership(ch.dps)
	wasKind := map[string]int{}
	for d := range ch.dirtyDest {
		wasKind[d] = httpKind(st.byService[d])
	}
	st.reindexDestinations(ch.dirtyDest)
	for d := range ch.dirtyDest {
		if httpKind(st.byService[d]) != wasKind[d] {
			// its outbounds' HTTP rules apply now, or no longer, or their routes' timeout
			// changes (httproute.go)
			ch.dirtyOut[d] = true
		}
	}
	names := changedNames{listeners: map[string]bool{}, clusters: map[string]bool{}, endpoints: map[string]bool{}}
	st.dropDestinationClusters(ch.dirtyDest, names)
	released := st.releaseOutbounds(ch.dirtyOut, s.Self, names)
	st.regenerateOutbounds(g, ch.dirtyOut, s.Self)
	st.dropUnusedClusters(released, names)
	names.addTouched(g.touched)
	for svc, msg := range g.routes.conflicts {
		st.conflicts[svc] = msg
	}
	r := st.patchedResources(g, names, trust)
	st.snap, st.res = s, r
	return r, true
}

// patchable reports whether s differs from the previous snapshot in TrafficRoutes and other
// dataplanes only (and t and o are the same).
func (st *genState) patchable(s *mesh.Snapshot, t *vipalloc.Table, o Options) bool {
	return st != nil && st.snap != nil && t.Hash() == st.table.Hash() && o == st.opts && s.Mesh == st.snap.Mesh &&
		!isRouterReplica(s) && !isRouterReplica(st.snap) && // a router replica's routes: generated in full (router.go)
		(s.Self == st.snap.Self || reflect.DeepEqual(s.Self, st.snap.Self)) &&
		sameList(s.MeshExternalServices, st.snap.MeshExternalServices, func(a, b *mesh.MeshExternalService) bool { return reflect.DeepEqual(a, b) }) &&
		!hasKuma2(s) && !hasKuma2(st.snap) // MeshServices and Kuma's route policies: generated in full
}

// hasKuma2 reports whether s holds MeshServices or Kuma's route policies, whose outbounds a
// patch does not track.
func hasKuma2(s *mesh.Snapshot) bool {
	return len(s.MeshServices)+len(s.MeshTCPRoutes)+len(s.MeshHTTPRoutes) > 0
}

// changes is what a patch redoes: the destination services whose members changed, the
// outbound services whose rules or destinations changed, the changed dataplanes.
type changes struct {
	dirtyDest, dirtyOut map[string]bool
	dps                 map[string]*mesh.Dataplane // name -> new (nil: removed)
}

// changesTo finds what changed from the previous snapshot to s; false when a TrafficRoute
// change is not to one exact destination service (a full generation is needed).
func (st *genState) changesTo(s *mesh.Snapshot) (changes, bool) {
	ch := changes{dirtyDest: map[string]bool{}, dirtyOut: map[string]bool{}, dps: map[string]*mesh.Dataplane{}}
	diffByName(st.snap.Dataplanes, s.Dataplanes, dpEqual, func(old, new *mesh.Dataplane) {
		for _, dp := range []*mesh.Dataplane{old, new} {
			if dp != nil {
				for _, svc := range dpServices(dp) {
					ch.dirtyDest[svc] = true
				}
			}
		}
		if new != nil {
			ch.dps[new.Name] = new
		} else {
			ch.dps[old.Name] = nil
		}
	})
	generic := false
	diffByName(st.snap.TrafficRoutes, s.TrafficRoutes, func(a, b *mesh.TrafficRoute) bool { return reflect.DeepEqual(a, b) }, func(old, new *mesh.TrafficRoute) {
		for _, tr := range []*mesh.TrafficRoute{old, new} {
			if tr == nil {
				continue
			}
			for _, d := range tr.Destinations {
				m := normalizeTags(d.Match)
				svc := m.Value(mesh.ServiceTag)
				if len(m) != 1 || svc == "" || svc == mesh.Wildcard {
					generic = true
				}
				ch.dirtyOut[svc] = true
			}
		}
	})
	if generic {
		return ch, false
	}
	for d := range ch.dirtyDest {
		for _, c := range st.destClusters[d] {
			for svc := range st.users[c] {
				ch.dirtyOut[svc] = true
			}
		}
	}
	return ch, true
}

// patchMembership patches the per-service index of dataplanes for the changed ones.
func (st *genState) patchMembership(dps map[string]*mesh.Dataplane) {
	for name, dp := range dps {
		if old := st.dps[name]; old != nil {
			for _, svc := range dpServices(old) {
				st.svcDPs[svc] = slices.DeleteFunc(st.svcDPs[svc], func(n string) bool { return n == name })
			}
		}
		if dp == nil {
			delete(st.dps, name)
			continue
		}
		st.dps[name] = dp
		for _, svc := range dpServices(dp) {
			i, _ := slices.BinarySearch(st.svcDPs[svc], name)
			st.svcDPs[svc] = slices.Insert(st.svcDPs[svc], i, name)
		}
	}
}

// reindexDestinations rebuilds the inbounds of each changed destination service.
func (st *genState) reindexDestinations(dirtyDest map[string]bool) {
	for d := range dirtyDest {
		var refs []inboundRef
		for _, name := range st.svcDPs[d] {
			dp := st.dps[name]
			for _, in := range dp.Networking.Inbound {
				if !in.Serving() {
					continue
				}
				tags := normalizeTags(in.Tags)
				if tags.Value(mesh.ServiceTag) == d {
					refs = append(refs, inboundRef{tags: tags, addr: inboundAddress(dp, in), port: in.Port})
				}
			}
		}
		if len(refs) == 0 {
			delete(st.byService, d)
		} else {
			st.byService[d] = refs
		}
	}
}

// changedNames are the names of the resources a patch changed, added or removed.
type changedNames struct{ listeners, clusters, endpoints map[string]bool }

func (n changedNames) addTouched(touched []memoKey) {
	for _, k := range touched {
		switch k.kind {
		case memoListener:
			n.listeners[k.name] = true
		case memoCluster:
			n.clusters[k.name] = true
		case memoEndpoints:
			n.endpoints[k.name] = true
		}
	}
}

// dropDestinationClusters forgets the clusters of changed services: whoever still uses them
// rebuilds them.
func (st *genState) dropDestinationClusters(dirtyDest map[string]bool, names changedNames) {
	for d := range dirtyDest {
		for _, c := range st.destClusters[d] {
			delete(st.clusters, c)
			delete(st.endpoints, c)
			delete(st.dest, c)
			names.clusters[c], names.endpoints[c] = true, true
		}
		delete(st.destClusters, d)
	}
}

// releaseOutbounds forgets what the dirty outbound services used and their listeners; it
// returns the clusters they used.
func (st *genState) releaseOutbounds(dirtyOut map[string]bool, self *mesh.Dataplane, names changedNames) map[string]bool {
	released := map[string]bool{}
	for svc := range dirtyOut {
		for _, c := range st.uses[svc] {
			delete(st.users[c], svc)
			released[c] = true
		}
		delete(st.uses, svc)
		delete(st.conflicts, svc)
		for _, ob := range st.obs[svc] {
			for _, name := range obListenerNames(ob, self) {
				delete(st.listeners, name)
				names.listeners[name] = true
			}
		}
	}
	return released
}

// regenerateOutbounds generates the outbounds of the dirty outbound services again.
func (st *genState) regenerateOutbounds(g *generator, dirtyOut map[string]bool, self *mesh.Dataplane) {
	for svc := range dirtyOut {
		for _, ob := range st.obs[svc] {
			if ob.vip != nil {
				g.vipOutbound(*ob.vip)
			} else {
				g.selfOutbound(ob.self, self.Networking.Outbound()[ob.self])
			}
		}
	}
}

// dropUnusedClusters removes the released clusters no outbound uses any more.
func (st *genState) dropUnusedClusters(released map[string]bool, names changedNames) {
	for c := range released {
		if len(st.users[c]) == 0 {
			delete(st.users, c)
			if d := st.dest[c]; d != "" {
				if _, ok := st.clusters[c]; ok {
					delete(st.clusters, c)
					delete(st.endpoints, c)
					delete(st.dest, c)
					st.destClusters[d] = slices.DeleteFunc(st.destClusters[d], func(n string) bool { return n == c })
					names.clusters[c], names.endpoints[c] = true, true
				}
			}
		}
	}
}

// patchedResources are the previous resources with the changed names replaced, and the
// delta from them.
func (st *genState) patchedResources(g *generator, names changedNames, trust *trustStore) *Resources {
	prev := st.res
	r := &Resources{
		Listeners: mergeSorted(prev.Listeners, st.listeners, names.listeners, func(l *listener.Listener) string { return l.Name }),
		Clusters:  mergeSorted(prev.Clusters, st.clusters, names.clusters, func(c *cluster.Cluster) string { return c.Name }),
		Endpoints: mergeSorted(prev.Endpoints, st.endpoints, names.endpoints, func(e *endpoint.ClusterLoadAssignment) string { return e.ClusterName }),
		Secrets:   prev.Secrets,
		Problems:  append(slices.Clone(g.problems), st.otherProblems...),
		trust:     trust,
	}
	for _, svc := range sortedKeys(st.conflicts) {
		r.Conflicts = append(r.Conflicts, st.conflicts[svc])
	}
	r.delta = &resDelta{base: prev, listeners: map[string]*listener.Listener{}, clusters: map[string]*cluster.Cluster{}, endpoints: map[string]*endpoint.ClusterLoadAssignment{}}
	for n := range names.listeners {
		r.delta.listeners[n] = st.listeners[n]
	}
	for n := range names.clusters {
		r.delta.clusters[n] = st.clusters[n]
	}
	for n := range names.endpoints {
		r.delta.endpoints[n] = st.endpoints[n]
	}
	return r
}

// obListenerNames are the listener names an outbound produces.
func obListenerNames(ob obRef, self *mesh.Dataplane) []string {
	if ob.vip != nil {
		var out []string
		if ob.vip.IPv4.IsValid() {
			out = append(out, listenerName("outbound", ob.vip.IPv4, ob.vip.Port))
		}
		if ob.vip.IPv6.IsValid() {
			out = append(out, listenerName("outbound", ob.vip.IPv6, ob.vip.Port))
		}
		return out
	}
	o := self.Networking.Outbound()[ob.self]
	ip, ok := selfOutboundIP(o)
	if !ok {
		return nil
	}
	return []string{listenerName("outbound", ip, o.Port)}
}

// mergeSorted is prev without the changed names, plus the changed names still in current,
// sorted by name.
func mergeSorted[T any](prev []T, current map[string]T, changed map[string]bool, name func(T) string) []T {
	if len(changed) == 0 {
		return prev
	}
	names := make([]string, 0, len(changed))
	for n := range changed {
		names = append(names, n)
	}
	sort.Strings(names)
	var fresh []T
	for _, n := range names {
		if m, ok := current[n]; ok {
			fresh = append(fresh, m)
		}
	}
	out := make([]T, 0, len(prev)+len(fresh))
	c, j := 0, 0 // next changed name, next fresh message
	for _, m := range prev {
		n := name(m)
		for c < len(names) && names[c] < n {
			c++
		}
		if c < len(names) && names[c] == n {
			continue // replaced or removed
		}
		for j < len(fresh) && name(fresh[j]) < n {
			out = append(out, fresh[j])
			j++
		}
		out = append(out, m)
	}
	return append(out, fresh[j:]...)
}

// diffByName walks two name-sorted lists and calls changed(old, new) for every name added,
// removed (new nil) or whose resource differs.
func diffByName[T interface {
	comparable
	GetMeta() *mesh.Meta
}](old, new []T, equal func(a, b T) bool, changed func(old, new T)) {
	var zero T
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].GetMeta().Name < new[j].GetMeta().Name):
			changed(old[i], zero)
			i++
		case i == len(old) || new[j].GetMeta().Name < old[i].GetMeta().Name:
			changed(zero, new[j])
			j++
		default:
			if old[i] != new[j] && !equal(old[i], new[j]) {
				changed(old[i], new[j])
			}
			i++
			j++
		}
	}
}

func sameList[T comparable](a, b []T, equal func(a, b T) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// dpEqual compares what the resources of this dataplane depend on in another dataplane.
func dpEqual(a, b *mesh.Dataplane) bool {
	if a.Name != b.Name || a.Networking.Address != b.Networking.Address ||
		a.Networking.AdvertisedAddress() != b.Networking.AdvertisedAddress() || len(a.Networking.Inbound) != len(b.Networking.Inbound) {
		return false
	}
	for i, x := range a.Networking.Inbound {
		y := b.Networking.Inbound[i]
		if x.Port != y.Port || x.Address() != y.Address() || x.Serving() != y.Serving() || !x.Tags.Equal(y.Tags) {
			return false
		}
	}
	return true
}

// newGeneratorFrom is a generator that adds to the previous state's resources.
func newGeneratorFrom(st *genState, s *mesh.Snapshot, t *vipalloc.Table, o Options) *generator {
	g := &generator{
		s: s, t: t, o: o, st: st,
		byService: st.byService,
		mes:       map[string]*mesh.MeshExternalService{},
		listeners: st.listeners,
		clusters:  st.clusters,
		endpoints: st.endpoints,
		prev:      st.memo,
		next:      st.memo,
	}
	for _, m := range s.MeshExternalServices {
		g.mes[m.Name] = m
	}
	g.routes, st.routes = newRouteIndexCached(s, g.problem, st.routes)
	g.kuma = newKumaRoutes(s)
	return g
}
