package authdns

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// DefaultTTL is the TTL of a shard's records when its router sets none: short, so a replica
// that leaves the set is soon gone from caches too.
const DefaultTTL = 30

// Router is one shard as DNS sees it.
type Router struct {
	// Name of the router resource; the canonical name is derived from it.
	Name string
	// Mesh is the router's mesh: routers of one name in two meshes are two routers.
	Mesh string
	// DNS is the shard's public DNS name, the origin of its zone (shard1.apps.example.com).
	DNS string
	// TTL of the shard's records and its negative TTL; 0 means DefaultTTL.
	TTL uint32
	// Replicas are the router's gateway dataplanes.
	Replicas []Replica
	// Revision is the store revision of the newest input of this zone (the router, its
	// replicas' readiness, the routes in it); it seeds the SOA serial (see NextSerial).
	Revision int64
}

// Replica is one gateway dataplane of a router.
type Replica struct {
	Name  string
	Addrs []netip.Addr
	Ready bool
}

// UserName is the host of an admitted route of dnsType user: the name, owned by the user,
// that must lead to its router.
type UserName struct {
	// Name is the route's host; "*.acme.test" for a Subdomain wildcard route.
	Name string
	// Router is the name of the router the route is admitted on, in Mesh (the route's).
	Router string
	Mesh   string
	// Revision is the store revision of the route.
	Revision int64
}

// Nameserver is a name server of every zone (an NS record); Addrs are its glue when the name
// falls inside the zone.
type Nameserver struct {
	Name  string
	Addrs []netip.Addr
}

// Input is everything the zones are built from.
type Input struct {
	Routers []Router
	Users   []UserName
	// UserZones are the users' domains this server is authoritative for; a user name under
	// one gets a CNAME there. A user name under no zone at all becomes a zone of its own
	// (its apex holds the router's addresses, since an apex cannot hold a CNAME).
	UserZones []string
	// Nameservers of every zone; when empty, each zone gets "ns.<origin>" with DefaultNSAddr
	// as its address: this server itself ("ns1.<origin>", "ns2.<origin>"... when a user
	// name holds "ns.<origin>": a user's name is never taken). Without DefaultNSAddr (or with
	// an unspecified one) that glue is 127.0.0.1 and Build reports it as a problem.
	Nameservers []Nameserver
	// DefaultNSAddr is the address of the default "ns.<origin>" (the address this server
	// answers on, when it is a specific one).
	DefaultNSAddr netip.Addr
	// Hostmaster is the SOA's mailbox (RNAME); default "hostmaster.<origin>".
	Hostmaster string
}

// CanonicalName is the name a user's own domain points its CNAME at for router r: a name
// the shard's wildcard answers (the apex itself is not covered by its wildcard, RFC 4592).
func CanonicalName(routerName, routerDNS string) string {
	return dns.Fqdn("router-" + strings.ToLower(routerName) + "." + strings.TrimSuffix(strings.ToLower(routerDNS), "."))
}

// Problem is an input that could not be served as given; the rest of the catalog is built.
type Problem struct {
	Name    string
	Message string
}

func (p Problem) Error() string { return p.Name + ": " + p.Message }

// node is one owner name in a zone: its RRsets by type. A node with no sets is an empty
// non-terminal (a name that exists only because names exist below it).
type node struct {
	sets map[uint16][]dns.RR
}

// Zone is one authoritative zone, immutable once built.
type Zone struct {
	Origin string // lower case, fully qualified
	TTL    uint32
	SOA    *dns.SOA
	// Router is the router whose zone this is ("" for a user zone).
	Router string
	nodes  map[string]*node
	hash   uint64
	rev    int64
	// wire is the zone's prepared form, made by the first catalog that serves the zone:
	// a zone kept into a later catalog (a held serial, an unchanged zone the agent swaps
	// in again) is not prepared again.
	wire *wireZone
}

// Serial is the zone's SOA serial.
func (z *Zone) Serial() uint32 { return z.SOA.Serial }

// Hash identifies the zone's content, serial aside: zones of equal content have equal hashes
// (0 for a zone read by ParseZone).
func (z *Zone) Hash() uint64 { return z.hash }

// Catalog is the set of zones served at one time, immutable once built.
type Catalog struct {
	zones map[string]*Zone // by origin: the closest zone of a name is found label by label
	wire  map[string]*wireZone
}

// Zones returns the zones ordered by origin.
func (c *Catalog) Zones() []*Zone {
	out := make([]*Zone, 0, len(c.zones))
	for _, z := range c.zones {
		out = append(out, z)
	}
	slices.SortFunc(out, func(a, b *Zone) int { return cmp.Compare(a.Origin, b.Origin) })
	return out
}

// Zone returns the zone with this origin, or nil.
func (c *Catalog) Zone(origin string) *Zone { return c.zones[strings.ToLower(dns.Fqdn(origin))] }

// find returns the zone that holds name (lower case, fully qualified): the one with the
// longest origin that is name or one of its ancestors - a map lookup per label of name,
// whatever the number of zones.
func (c *Catalog) find(name string) *Zone {
	if c == nil || len(c.zones) == 0 {
		return nil
	}
	for off := 0; ; {
		if z := c.zones[name[off:]]; z != nil {
			return z
		}
		next, end := dns.NextLabel(name, off)
		if end {
			return c.zones["."]
		}
		off = next
	}
}

// Build turns the input into zones. Serials come from serials (nil: NextSerial(0, each
// zone's Revision)). Problems name what could not be served; everything else is.
func Build(in Input, serials SerialSource) (*Catalog, []Problem) {
	b := builder{in: in, cat: &Catalog{zones: map[string]*Zone{}}, users: make(map[string]bool, len(in.Users))}
	for _, u := range in.Users {
		b.users[strings.ToLower(dns.Fqdn(u.Name))] = true
	}
	if a := in.DefaultNSAddr; len(in.Nameservers) == 0 && (!a.IsValid() || a.IsUnspecified()) && len(in.Routers)+len(in.UserZones) > 0 {
		b.problem("ns.<zone>", "no name server address: the zones' NS has the glue 127.0.0.1, this machine only (give the name servers and their addresses, or a specific address to serve on)")
	}
	routers := map[string]*Router{}
	for i := range in.Routers {
		b.addRouter(&in.Routers[i], routers)
	}
	for _, uz := range in.UserZones {
		b.zone(uz, DefaultTTL, "", 0)
	}
	users := slices.Clone(in.Users)
	slices.SortFunc(users, func(a, b UserName) int {
		return cmp.Or(cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)), cmp.Compare(a.Router, b.Router))
	})
	for _, u := range users {
		b.addUser(u, routers)
	}
	for _, z := range b.cat.zones {
		z.keepWildcardAnswers()
		z.hash = z.contentHash()
		if serials == nil {
			z.SOA.Serial = NextSerial(0, z.rev)
		} else {
			z.SOA.Serial = serials.Serial(z.Origin, z.hash, z.rev)
		}
	}
	b.cat.prepare()
	return b.cat, b.problems
}

type builder struct {
	in       Input
	cat      *Catalog
	problems []Problem
	users    map[string]bool // the user names (lower case, fully qualified)
}

func (b *builder) problem(name, format string, args ...any) {
	b.problems = append(b.problems, Problem{Name: name, Message: fmt.Sprintf(format, args...)})
}

// zone returns the zone at origin, creating it with its SOA and NS.
func (b *builder) zone(origin string, ttl uint32, router string, rev int64) *Zone {
	origin = strings.ToLower(dns.Fqdn(origin))
	if z, ok := b.cat.zones[origin]; ok {
		z.rev = max(z.rev, rev)
		return z
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	z := &Zone{Origin: origin, TTL: ttl, Router: router, nodes: map[string]*node{}, rev: rev}
	nss := b.in.Nameservers
	if len(nss) == 0 {
		a := b.in.DefaultNSAddr
		if !a.IsValid() || a.IsUnspecified() {
			a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		nss = []Nameserver{{Name: b.defaultNS(origin), Addrs: []netip.Addr{a}}}
	}
	mbox := b.in.Hostmaster
	if mbox == "" {
		mbox = "hostmaster." + origin
	}
	z.SOA = &dns.SOA{
		Hdr:     dns.RR_Header{Name: origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      strings.ToLower(dns.Fqdn(nss[0].Name)),
		Mbox:    strings.ToLower(dns.Fqdn(mbox)),
		Refresh: 300, Retry: 60, Expire: 1209600, Minttl: ttl,
	}
	z.add(z.SOA)
	for _, ns := range nss {
		name := strings.ToLower(dns.Fqdn(ns.Name))
		z.add(&dns.NS{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}, Ns: name})
		if dns.IsSubDomain(origin, name) {
			for _, a := range ns.Addrs {
				z.add(addrRR(name, a, ttl))
			}
		}
	}
	b.cat.zones[origin] = z
	return z
}

// defaultNS is the zone's own name server name: ns.<origin>, or ns1, ns2... when a user
// name holds it.
func (b *builder) defaultNS(origin string) string {
	name := "ns." + origin
	for i := 1; b.users[name]; i++ {
		name = fmt.Sprintf("ns%d.%s", i, origin)
	}
	return name
}

func (b *builder) addRouter(r *Router, seen map[string]*Router) {
	if _, ok := dns.IsDomainName(r.DNS); !ok || r.DNS == "" {
		b.problem(r.Name, "router dns %q is not a domain name", r.DNS)
		return
	}
	origin := strings.ToLower(dns.Fqdn(r.DNS))
	if z, ok := b.cat.zones[origin]; ok {
		b.problem(r.Name, "router dns %q is already the zone of router %q: served by %q only", r.DNS, z.Router, z.Router)
		return
	}
	z := b.zone(origin, r.TTL, r.Name, r.Revision)
	seen[r.Mesh+"/"+r.Name] = r
	for _, a := range servedAddrs(r.Replicas) {
		z.add(addrRR("*."+origin, a, z.TTL))
	}
}

// servedAddrs are the addresses a shard answers with: those of its ready replicas, or, when
// none is ready, all of them (fail static: a shard that answers nothing is down for sure).
func servedAddrs(reps []Replica) []netip.Addr {
	var ready, all []netip.Addr
	for _, r := range reps {
		for _, a := range r.Addrs {
			all = append(all, a)
			if r.Ready {
				ready = append(ready, a)
			}
		}
	}
	if len(ready) == 0 {
		ready = all
	}
	slices.SortFunc(ready, netip.Addr.Compare)
	return slices.Compact(ready)
}

func (b *builder) addUser(u UserName, routers map[string]*Router) {
	r, ok := routers[u.Mesh+"/"+u.Router]
	if !ok {
		b.problem(u.Name, "router %q is unknown or has no zone", u.Router)
		return
	}
	name := strings.ToLower(dns.Fqdn(u.Name))
	if _, ok := dns.IsDomainName(name); !ok {
		b.problem(u.Name, "not a domain name")
		return
	}
	target := CanonicalName(r.Name, r.DNS)
	if strings.TrimPrefix(name, "*.") == target || name == target {
		b.problem(u.Name, "is the canonical name of router %q itself", r.Name)
		return
	}
	z := b.cat.find(name)
	if z == nil {
		// A name under no zone of ours: a zone of its own. Its apex cannot hold a CNAME, so
		// it holds the router's addresses (flattened).
		apex := strings.TrimPrefix(name, "*.")
		z = b.zone(apex, r.TTL, "", u.Revision)
	}
	z.rev = max(z.rev, u.Revision)
	if n := z.nodes[name]; n != nil && len(n.sets[dns.TypeCNAME]) > 0 {
		if have := n.sets[dns.TypeCNAME][0].(*dns.CNAME).Target; have != target {
			b.problem(u.Name, "already points at %s: one name leads to one router, this route's router %q is not served for it", have, u.Router)
		}
		return
	}
	if name == z.Origin {
		if z.Router != "" {
			b.problem(u.Name, "is the zone of router %q itself", z.Router)
			return
		}
		for _, a := range servedAddrs(r.Replicas) {
			z.add(addrRR(name, a, z.TTL))
		}
		return
	}
	if n := z.nodes[name]; n != nil && len(n.sets) > 0 {
		b.problem(u.Name, "already has records in zone %s: a CNAME cannot share its name", z.Origin)
		return
	}
	z.add(&dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: z.TTL}, Target: target})
}

func addrRR(name string, a netip.Addr, ttl uint32) dns.RR {
	if a.Is4() || a.Is4In6() {
		return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.Unmap().AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}

// add puts rr at its owner and makes every name between it and the origin exist (empty
// non-terminals), so a wildcard above them never answers for them (RFC 4592 2.2.2).
func (z *Zone) add(rr dns.RR) {
	name := strings.ToLower(rr.Header().Name)
	rr.Header().Name = name
	n := z.nodes[name]
	if n == nil {
		n = &node{sets: map[uint16][]dns.RR{}}
		z.nodes[name] = n
	}
	n.sets[rr.Header().Rrtype] = append(n.sets[rr.Header().Rrtype], rr)
	for p := parent(name); p != "" && dns.IsSubDomain(z.Origin, p) && p != z.Origin; p = parent(p) {
		if z.nodes[p] == nil {
			z.nodes[p] = &node{sets: map[uint16][]dns.RR{}}
		}
	}
}

func parent(name string) string {
	i, end := dns.NextLabel(name, 0)
	if end {
		return ""
	}
	return name[i:]
}

// Records returns every record of the zone, SOA first, then by owner, type and data: the
// order of a zone transfer and of the master file.
func (z *Zone) Records() []dns.RR {
	out := []dns.RR{z.SOA}
	names := make([]string, 0, len(z.nodes))
	for n := range z.nodes {
		names = append(names, n)
	}
	slices.SortFunc(names, compareNames)
	for _, name := range names {
		n := z.nodes[name]
		types := make([]uint16, 0, len(n.sets))
		for t := range n.sets {
			types = append(types, t)
		}
		slices.Sort(types)
		for _, t := range types {
			if t == dns.TypeSOA {
				continue
			}
			out = append(out, n.sets[t]...)
		}
	}
	return out
}

// compareNames orders names canonically (RFC 4034 6.1: by labels from the right).
func compareNames(a, b string) int {
	la, lb := dns.SplitDomainName(a), dns.SplitDomainName(b)
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if c := cmp.Compare(la[i], lb[j]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(la), len(lb))
}

// contentHash identifies the zone's data, serial aside: equal content, equal hash.
func (z *Zone) contentHash() uint64 {
	h := fnv.New64a()
	for _, rr := range z.Records() {
		if soa, ok := rr.(*dns.SOA); ok {
			c := *soa
			c.Serial = 0
			rr = &c
		}
		h.Write([]byte(rr.String()))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}
