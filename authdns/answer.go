package authdns

import (
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"
)

// maxChase bounds CNAME chasing inside one answer; a longer chain is treated as a loop.
const maxChase = 8

// ednsSize is the UDP payload size this server advertises and answers within.
const ednsSize = 1232

// rotation turns the address sets of every answer: each answer starts one further on.
var rotation atomic.Uint32

// Holds reports whether name falls in one of the catalog's zones (a nil catalog holds none).
func (c *Catalog) Holds(name string) bool {
	if c == nil || len(c.zones) == 0 {
		return false
	}
	return c.find(strings.ToLower(dns.Fqdn(name))) != nil
}

// Reply is the whole response to a query as it goes on the wire: malformed and unsupported
// requests get their error (FORMERR, NOTIMP, BADVERS, REFUSED for other classes and for zone
// transfers, which the Server serves itself), a standard query gets Answer with EDNS when
// asked, truncated to the client's UDP size unless tcp.
func (c *Catalog) Reply(req *dns.Msg, tcp bool) *dns.Msg {
	m := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.SetRcode(req, dns.RcodeNotImplemented)
		return m
	case len(req.Question) != 1 || !optWellPlaced(req):
		m.SetRcodeFormatError(req)
		return m
	}
	opt := req.IsEdns0()
	if opt != nil && opt.Version() != 0 {
		m.SetReply(req)
		m.Rcode = dns.RcodeBadVers
		m.SetEdns0(ednsSize, false)
		return m
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		m.SetRcode(req, dns.RcodeRefused)
		return m
	}
	resp := c.Answer(req)
	if opt != nil {
		resp.SetEdns0(ednsSize, opt.Do()) // DO echoed (RFC 3225 3)
	}
	if !tcp {
		size := dns.MinMsgSize
		if opt != nil {
			size = int(min(max(opt.UDPSize(), dns.MinMsgSize), ednsSize))
		}
		resp.Truncate(size)
	}
	return resp
}

// optWellPlaced: at most one OPT, in the additional section, owned by the root (RFC 6891
// 6.1.1); anything else is a FORMERR.
func optWellPlaced(req *dns.Msg) bool {
	for _, sect := range [][]dns.RR{req.Answer, req.Ns} {
		for _, rr := range sect {
			if rr.Header().Rrtype == dns.TypeOPT {
				return false
			}
		}
	}
	n := 0
	for _, rr := range req.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			if n++; n > 1 || rr.Header().Name != "." {
				return false
			}
		}
	}
	return true
}

// Answer returns the authoritative response to a standard query for qname/qtype. It never
// fails: names outside every zone get REFUSED, names in a zone get NOERROR (with data or
// NODATA) or NXDOMAIN, each negative answer with the zone's SOA in authority. An answer to
// class ANY is not authoritative (RFC 1034 6.2.2: the server may not hold every class) and
// carries no SOA, as nsd answers it. An NS answer carries the addresses of the name servers
// inside its zone in the additional section (RFC 1035 3.3.11).
func (c *Catalog) Answer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = false
	q := req.Question[0]
	qname := strings.ToLower(q.Name)
	z := c.find(qname)
	if z == nil {
		m.Rcode = dns.RcodeRefused
		return m
	}
	anyClass := q.Qclass == dns.ClassANY
	m.Authoritative = !anyClass
	seen := map[string]bool{}
	for range maxChase {
		seen[qname] = true
		rrs, rcode, next := z.lookup(qname, q.Qtype)
		m.Answer = append(m.Answer, rrs...)
		if next == "" {
			if (rcode != dns.RcodeSuccess || len(rrs) == 0) && !anyClass {
				m.Ns = []dns.RR{z.negativeSOA()}
			}
			if q.Qtype == dns.TypeNS {
				m.Extra = z.glue(rrs)
			}
			// The rcode of a chased answer is that of the last name (RFC 6604).
			m.Rcode = rcode
			return m
		}
		if seen[next] {
			// A loop: the chain so far is the answer (as BIND gives it); never chased again.
			return m
		}
		nz := c.find(next)
		if nz == nil {
			// The target is outside our zones: the resolver follows it.
			return m
		}
		z, qname = nz, next
	}
	m.Rcode = dns.RcodeServerFailure
	return m
}

// lookup answers qname/qtype from this zone. next is the CNAME target to chase.
func (z *Zone) lookup(qname string, qtype uint16) (rrs []dns.RR, rcode int, next string) {
	n := z.nodes[qname]
	owner := qname
	if n == nil {
		// RFC 4592: the source of synthesis is the wildcard child of the closest encloser,
		// the longest ancestor that exists. A name that exists (even as an empty
		// non-terminal) is never answered by a wildcard, nor is the apex.
		ce := parent(qname)
		for ce != "" && z.nodes[ce] == nil && ce != z.Origin {
			ce = parent(ce)
		}
		n = z.nodes["*."+ce]
		if n == nil {
			return nil, dns.RcodeNameError, ""
		}
	}
	if cn := n.sets[dns.TypeCNAME]; len(cn) > 0 && qtype != dns.TypeCNAME {
		rr := withOwner(cn[0], owner)
		if qtype == dns.TypeANY {
			return []dns.RR{rr}, dns.RcodeSuccess, "" // the CNAME answers ANY, unchased (RFC 1034 4.3.2 3a)
		}
		return []dns.RR{rr}, dns.RcodeSuccess, strings.ToLower(rr.(*dns.CNAME).Target)
	}
	if qtype == dns.TypeANY {
		for t, set := range n.sets {
			if t != dns.TypeSOA || owner == z.Origin {
				rrs = append(rrs, rotated(set, owner)...)
			}
		}
		return rrs, dns.RcodeSuccess, ""
	}
	return rotated(n.sets[qtype], owner), dns.RcodeSuccess, ""
}

// glue is the A and AAAA records, in this zone, of the targets of the NS records in rrs.
func (z *Zone) glue(rrs []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		ns, ok := rr.(*dns.NS)
		if !ok {
			continue
		}
		if n := z.nodes[strings.ToLower(ns.Ns)]; n != nil {
			out = append(out, n.sets[dns.TypeA]...)
			out = append(out, n.sets[dns.TypeAAAA]...)
		}
	}
	return out
}

// rotated copies set, starting at the next rotation, with owner as its name (a wildcard's
// records are synthesized with the query name).
func rotated(set []dns.RR, owner string) []dns.RR {
	if len(set) == 0 {
		return nil
	}
	k := 0
	if len(set) > 1 {
		k = int(rotation.Add(1) % uint32(len(set)))
	}
	out := make([]dns.RR, len(set))
	for i := range set {
		out[i] = withOwner(set[(i+k)%len(set)], owner)
	}
	return out
}

func withOwner(rr dns.RR, owner string) dns.RR {
	if rr.Header().Name == owner {
		return rr
	}
	c := dns.Copy(rr)
	c.Header().Name = owner
	return c
}

// negativeSOA is the SOA of a negative answer: its TTL is the negative-caching TTL, the
// smaller of the SOA's own TTL and its minimum (RFC 2308 3).
func (z *Zone) negativeSOA() dns.RR {
	soa := *z.SOA
	soa.Hdr.Ttl = min(soa.Hdr.Ttl, soa.Minttl)
	return &soa
}
