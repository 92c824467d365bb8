// Package shardzones keeps the zones of router shards in step with the store: a zone per
// Router with the addresses of its ready gateway dataplanes, and a CNAME per admitted
// user-domain Route. It owns the translation from resources to authdns.Input, the loop that
// follows the store and the replicas' readiness, the zones' serials kept in etcd (Serials:
// one serial per content on every replica), and handing each catalog built to its sinks:
// the control plane's authoritative DNS (package authdns) and the DNSZone documents sent to
// the agents (Docs, FeedSink). Answering DNS is authdns's, scheduling routes is the route
// scheduler's, serving agents is fanout's.
package shardzones

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Ready reports whether a gateway dataplane (mesh, name) is ready; nil takes every one as
// ready.
type Ready func(meshName, name string) bool

// Input builds the zones' input from the store's items: every Router (its replicas are the
// Dataplanes of its mesh whose inbound tags match router.dataplanes, at their address), and
// every Route of dnsType user admitted on the router it is scheduled onto. An item that does
// not decode is skipped.
func Input(items []store.Item, ready Ready, log *slog.Logger) authdns.Input {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var in authdns.Input
	var routers []*mesh.Router
	routerRev := map[string]int64{} // mesh/name -> revision of the zone's newest input
	var dps []*mesh.Dataplane
	dpRev := map[*mesh.Dataplane]int64{}
	var routes []*mesh.Route
	routeRev := map[*mesh.Route]int64{}
	for _, it := range items {
		switch it.Type {
		case mesh.KindRouter, mesh.KindDataplane, mesh.KindRoute:
		default:
			continue
		}
		rs, err := mesh.Decode(it.Key.String(), it.Doc)
		if err != nil || len(rs) != 1 {
			log.Warn("a stored resource does not decode; not in the zones", "resource", it.Key.String(), "error", err)
			continue
		}
		switch r := rs[0].(type) {
		case *mesh.Router:
			r.Mesh = it.Mesh
			routers = append(routers, r)
			routerRev[it.Mesh+"/"+r.Name] = it.Version
		case *mesh.Dataplane:
			r.Mesh = it.Mesh
			dps = append(dps, r)
			dpRev[r] = it.Version
		case *mesh.Route:
			r.Mesh = it.Mesh
			routes = append(routes, r)
			routeRev[r] = it.Version
		}
	}
	sort.Slice(routers, func(i, j int) bool { return routers[i].Mesh+"/"+routers[i].Name < routers[j].Mesh+"/"+routers[j].Name })
	for _, rt := range routers {
		zr := authdns.Router{Name: rt.Name, Mesh: rt.Mesh, DNS: rt.DNS, Revision: routerRev[rt.Mesh+"/"+rt.Name]}
		for _, dp := range dps {
			if dp.Mesh != rt.Mesh || len(rt.Dataplanes) == 0 || !servesRouter(dp, rt) {
				continue
			}
			a, err := netip.ParseAddr(address(dp))
			if err != nil {
				continue
			}
			ok := ready == nil || ready(dp.Mesh, dp.Name)
			zr.Replicas = append(zr.Replicas, authdns.Replica{Name: dp.Name, Addrs: []netip.Addr{a}, Ready: ok})
			zr.Revision = max(zr.Revision, dpRev[dp])
		}
		in.Routers = append(in.Routers, zr)
	}
	for _, r := range routes {
		if r.DNSType != mesh.DNSTypeUser || !r.Admitted() {
			continue
		}
		in.Users = append(in.Users, authdns.UserName{Name: userName(r), Router: r.Status.Router, Mesh: r.Mesh, Revision: routeRev[r]})
		for i := range in.Routers { // the route's change is a change of its router's zone too
			if in.Routers[i].Name == r.Status.Router && in.Routers[i].Mesh == r.Mesh {
				in.Routers[i].Revision = max(in.Routers[i].Revision, routeRev[r])
			}
		}
	}
	return in
}

// userName is the DNS name a user route claims: its host, or *.<domain> for a Subdomain
// wildcard route on www.domain.
func userName(r *mesh.Route) string {
	if r.WildcardPolicy == mesh.WildcardSubdomain {
		if i := indexDot(r.Host); i > 0 {
			return "*" + r.Host[i:]
		}
	}
	return r.Host
}

func indexDot(s string) int {
	for i := range len(s) {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

func servesRouter(dp *mesh.Dataplane, rt *mesh.Router) bool {
	for _, in := range dp.Networking.Inbound {
		if rt.Dataplanes.Matches(in.Tags) {
			return true
		}
	}
	return false
}

func address(dp *mesh.Dataplane) string {
	if dp.Networking.AdvertisedAddress() != "" {
		return dp.Networking.AdvertisedAddress()
	}
	return dp.Networking.Address
}

// Sink receives every catalog built; it must not keep the caller waiting.
type Sink func(*authdns.Catalog)

// ReadinessPoll is how often Run asks whether the gateway replicas' readiness changed: a
// replica that goes not-ready leaves the answers within about this (plus a rebuild).
const ReadinessPoll = 100 * time.Millisecond

// Shared is readiness shared between the replicas: each publishes the gateway replicas
// whose agents hold a stream to it, and every replica takes as ready those that any
// replica publishes, so that every replica answers the same (store.Presence).
type Shared interface {
	// Publish sets the gateway replicas ready here ("mesh/name").
	Publish(names []string)
	// Elsewhere says whether another replica has a gateway replica ready.
	Elsewhere(name string) bool
}

// Run keeps the zones in step with st until ctx ends, handing every catalog it builds to
// sinks (the DNS server's Swap; the documents sent to agents, Docs): a list, then a rebuild
// after every burst of changes (re-listing; on compaction too), and, when readiness is given
// (it is not in the store), a rebuild of the last list as soon as a gateway replica's
// readiness differs from the one the zones were built with (asked every ReadinessPoll).
// Serials come from serials, kept in etcd (nil: this process's own, authdns.Serials), so
// replicas give the same serial for the same content, also after a restart.
// With shared (nil: this replica's readiness alone), a gateway replica is ready when its
// agent holds a stream to any replica.
func Run(ctx context.Context, st store.Store, cfg authdns.Input, ready Ready, shared Shared, serials *Serials, log *slog.Logger, sinks ...Sink) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ready != nil && shared != nil {
		local := ready
		ready = func(meshName, name string) bool {
			return local(meshName, name) || shared.Elsewhere(meshName+"/"+name)
		}
		// publish: the gateway replicas of the last build that are ready here, at every
		// readiness poll.
		var gateways []string
		publish := func() {
			var here []string
			for _, g := range gateways {
				m, n, _ := strings.Cut(g, "/")
				if local(m, n) {
					here = append(here, g)
				}
			}
			shared.Publish(here)
		}
		runZones(ctx, st, cfg, ready, func(probed []string) { gateways = probed; publish() }, serials, log, sinks...)
		return
	}
	runZones(ctx, st, cfg, ready, nil, serials, log, sinks...)
}

// runZones is Run; tick, when given, is called at every readiness poll (and after every
// build) with the gateway replicas ("mesh/name") of the last build.
func runZones(ctx context.Context, st store.Store, cfg authdns.Input, ready Ready, tick func([]string), serials *Serials, log *slog.Logger, sinks ...Sink) {
	local := authdns.NewSerials()
	var recordsChanged <-chan struct{}
	if serials != nil {
		go serials.Run(ctx)
		if _, err := serials.Load(ctx); err != nil { // before the first build: its serials are the records'
			log.Warn("zone serials unreadable; read again when the store answers", "error", err)
		}
		recordsChanged = serials.Changed()
	}
	var served *authdns.Catalog
	var items []store.Item
	// probes: the readiness each replica had when the zones were built.
	type probe struct {
		mesh, name string
		ready      bool
	}
	var probes []probe
	// gateways: the probes' gateway replicas ("mesh/name"), for tick; set at each build
	var gateways []string
	recording := ready
	if ready != nil {
		recording = func(meshName, name string) bool {
			r := ready(meshName, name)
			probes = append(probes, probe{meshName, name, r})
			return r
		}
	}
	build := func() {
		probes = probes[:0]
		in := Input(items, recording, log)
		in.Nameservers, in.Hostmaster, in.UserZones, in.DefaultNSAddr = cfg.Nameservers, cfg.Hostmaster, cfg.UserZones, cfg.DefaultNSAddr
		var cat *authdns.Catalog
		var problems []authdns.Problem
		if serials != nil {
			cat, problems = serials.Build(in, served)
		} else {
			cat, problems = authdns.Build(in, local)
		}
		served = cat
		for _, p := range problems {
			log.Warn("not served in DNS", "name", p.Name, "problem", p.Message)
		}
		for _, sink := range sinks {
			sink(cat)
		}
		if tick != nil {
			gateways = make([]string, 0, len(probes))
			for _, p := range probes {
				gateways = append(gateways, p.mesh+"/"+p.name)
			}
			tick(gateways)
		}
	}
	readinessChanged := func() bool {
		for _, p := range probes {
			if ready(p.mesh, p.name) != p.ready {
				return true
			}
		}
		return false
	}
	// byKey is what the store holds, as listed and then followed through the watch's events:
	// a change costs one rebuild of the zones, not a list of the whole store.
	byKey := map[store.Key]store.Item{}
	relist := func() (int64, bool) {
		its, _, rev, err := st.List(ctx, "", "", "", 0)
		if err != nil {
			log.Warn("store unreachable; the zones stay as they were", "error", err)
			return 0, false
		}
		clear(byKey)
		for _, it := range its {
			byKey[it.Key] = it
		}
		items = its
		build()
		return rev, true
	}
	apply := func(e store.Event) {
		switch e.Type {
		case store.Put:
			byKey[e.Item.Key] = e.Item
		case store.Delete:
			delete(byKey, e.Item.Key)
		}
	}
	rebuild := func() {
		items = slices.SortedFunc(maps.Values(byKey), func(a, b store.Item) int {
			return strings.Compare(a.Key.String(), b.Key.String())
		})
		build()
	}
	for ctx.Err() == nil {
		rev, ok := relist()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		events := st.Watch(wctx, rev)
		var poll <-chan time.Time
		ticker := time.NewTicker(ReadinessPoll)
		if ready != nil {
			poll = ticker.C
		}
	follow:
		for {
			select {
			case <-ctx.Done():
				ticker.Stop()
				cancel()
				return
			case <-recordsChanged:
				build()
			case <-poll:
				if readinessChanged() {
					build() // ticks
				} else if tick != nil {
					tick(gateways)
				}
			case e, ok := <-events:
				if !ok || e.Type == store.Relist {
					break follow
				}
				apply(e)
				for quiet := false; !quiet; { // one rebuild per burst
					select {
					case e2, ok := <-events:
						if !ok || e2.Type == store.Relist {
							break follow
						}
						apply(e2)
					case <-time.After(20 * time.Millisecond):
						quiet = true
					}
				}
				rebuild()
			}
		}
		ticker.Stop()
		cancel()
	}
}
