// Package shardzones keeps the zones of router shards in step with the store: a zone per
// Router with the addresses of its ready replicas (as its status says), and a CNAME per
// admitted user-domain Route. It owns the translation from resources to authdns.Input, the
// loop that follows the store, the zones' serials kept in etcd (Serials: one serial per
// content on every replica), and handing each catalog built to its sinks: the control
// plane's authoritative DNS (package authdns) and the DNSZone documents sent to the agents
// (Docs, FeedSink). Answering DNS is authdns's, scheduling routes is the route scheduler's,
// deciding which replicas are ready routerstatus's, serving agents is fanout's.
package shardzones

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Input builds the zones' input from the store's items: every Router, with its replicas
// and their readiness as its status says (package routerstatus: the leader writes it, the
// views show it; a router with no status yet has its selected dataplanes, none ready), and
// every Route of dnsType user admitted on the router it is scheduled onto. An item that does
// not decode is skipped.
func Input(items []store.Item, log *slog.Logger) authdns.Input {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var in authdns.Input
	var routers []*mesh.Router
	routerRev := map[string]int64{} // mesh/name -> revision of the zone's newest input
	created := map[*mesh.Router]time.Time{}
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
			created[r] = it.Created
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
	// Oldest first (the store's creation time, then mesh and name): of two routers with one
	// dns, the older keeps its zone (authdns serves the first), as the scheduler decides.
	slices.SortFunc(routers, func(a, b *mesh.Router) int {
		return cmp.Or(created[a].Compare(created[b]), strings.Compare(a.Mesh+"/"+a.Name, b.Mesh+"/"+b.Name))
	})
	for _, rt := range routers {
		zr := authdns.Router{Name: rt.Name, Mesh: rt.Mesh, DNS: rt.DNS, Revision: routerRev[rt.Mesh+"/"+rt.Name]}
		for _, dp := range dps {
			if _, ok := rt.Replica(dp); ok && dp.Mesh == rt.Mesh {
				zr.Revision = max(zr.Revision, dpRev[dp])
			}
		}
		for _, rep := range replicas(rt, dps) {
			if a, err := netip.ParseAddr(rep.Address); err == nil {
				zr.Replicas = append(zr.Replicas, authdns.Replica{Name: rep.Name, Addrs: []netip.Addr{a}, Ready: rep.Ready})
			}
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

// replicas are the router's replicas as its status says, or, before the leader wrote one,
// its selected dataplanes, none ready (the zone answers them all: fail static).
func replicas(rt *mesh.Router, dps []*mesh.Dataplane) []mesh.RouterReplica {
	if rt.Status != nil {
		return rt.Status.Replicas
	}
	return routerstatus.Replicas(rt, dps, nil)
}

// Zones is one build of the zones.
type Zones struct {
	// All is every mesh's zones: what the control plane's DNS serves (one DNS for all).
	All *authdns.Catalog
	// Meshes is each mesh's own (MeshCatalogs): what that mesh's agents answer.
	Meshes map[string]*authdns.Catalog
}

// Sink receives every build; it must not keep the caller waiting.
type Sink func(*Zones)

// MeshCatalogs builds each mesh's own zones from the input of every mesh: the zones of its
// routers, and the users' zones holding its user names only. An agent answers the route
// names of its own mesh, never another's (a route writer of one mesh must not rewrite the
// names another mesh's agents resolve); everything else it asks upstream, where the control
// plane's DNS answers every mesh. Each zone gets the serial its origin has in all, the
// catalog that DNS serves: a router's zone is the same zone, serial included. With one mesh,
// its catalog is all itself (nothing built twice).
func MeshCatalogs(in authdns.Input, all *authdns.Catalog) map[string]*authdns.Catalog {
	per := map[string]*authdns.Input{}
	of := func(m string) *authdns.Input {
		if per[m] == nil {
			per[m] = &authdns.Input{UserZones: in.UserZones, Nameservers: in.Nameservers, DefaultNSAddr: in.DefaultNSAddr, Hostmaster: in.Hostmaster}
		}
		return per[m]
	}
	for _, r := range in.Routers {
		of(r.Mesh).Routers = append(of(r.Mesh).Routers, r)
	}
	for _, u := range in.Users {
		of(u.Mesh).Users = append(of(u.Mesh).Users, u)
	}
	out := make(map[string]*authdns.Catalog, len(per))
	if len(per) == 1 { // one mesh: its zones are all of them
		for m := range per {
			out[m] = all
		}
		return out
	}
	for m, mi := range per {
		out[m], _ = authdns.Build(*mi, servedSerials{all}) // the problems are the whole build's, logged from it
	}
	return out
}

// servedSerials gives a zone the serial its origin has in a catalog (a new zone's first serial
// when it has none there).
type servedSerials struct{ cat *authdns.Catalog }

func (s servedSerials) Serial(origin string, hash uint64, rev int64) uint32 {
	if z := s.cat.Zone(origin); z != nil {
		return z.Serial()
	}
	return authdns.NextSerial(0, rev)
}

// Run keeps the zones in step with st until ctx ends, handing every build to sinks (the DNS
// server's Swap of every mesh's zones; each mesh's zones sent to its agents, FeedSink): a list, then a rebuild
// after every burst of changes (re-listing; on compaction too). Readiness is in the store
// (the Routers' status), so a replica going not-ready is a change like any other and every
// replica answers the same. Serials come from serials, kept in etcd (nil: this process's
// own, authdns.Serials), so replicas give the same serial for the same content, also after
// a restart.
func Run(ctx context.Context, st store.Store, cfg authdns.Input, serials *Serials, log *slog.Logger, sinks ...Sink) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
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
	build := func() {
		in := Input(items, log)
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
		zones := &Zones{All: cat, Meshes: MeshCatalogs(in, cat)}
		for _, sink := range sinks {
			sink(zones)
		}
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
	follow:
		for {
			select {
			case <-ctx.Done():
				cancel()
				return
			case <-recordsChanged:
				build()
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
		cancel()
	}
}
