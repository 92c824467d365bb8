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
	"log/slog"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Input builds the zones' input from the store's items: every Router, with its replicas
// and their readiness as its status says (package routerstatus: the leader writes it, the
// views show it; a router with no status yet has its selected dataplanes, none ready), and
// every Route of dnsType user admitted on the router it is scheduled onto. An item that does
// not decode is skipped; the user names come in the items' order. Run keeps the same input
// change by change (view).
func Input(items []store.Item, log *slog.Logger) authdns.Input {
	v := newView(log)
	v.load(items)
	at := make(map[store.Key]int, len(v.users))
	for i, it := range items {
		if _, ok := v.users[it.Key]; ok {
			at[it.Key] = i
		}
	}
	return v.input(func(a, b store.Key) int { return cmp.Compare(at[a], at[b]) })
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
