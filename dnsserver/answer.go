package dnsserver

import (
	"encoding/binary"
	"hash/fnv"
	"net/netip"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/vipalloc"
)

// view is what one query reads: a Table (immutable, indexed by its builder) and the SOA
// serial derived from its hash. Swap replaces the whole view in one atomic store, so a
// query never sees half of an update, and costs O(1): the table's own hostname and VIP
// indexes serve the lookups, nothing is rebuilt per table.
type view struct {
	table  *vipalloc.Table
	serial uint32
}

func newView(t *vipalloc.Table) *view {
	f := fnv.New32a()
	f.Write([]byte(t.Hash()))
	return &view{table: t, serial: f.Sum32()}
}

// lookup finds an available entry by its lower-case name, without allocating: the name is
// a view of the caller's buffer, which is not modified while the lookup runs, and Table
// lookups do not keep the string (were one ever to, escape analysis would move the buffer
// to the heap: slower, still correct).
func (v *view) lookup(key []byte) *vipalloc.Entry {
	if len(key) == 0 {
		return nil
	}
	e, ok := v.table.Lookup(unsafe.String(&key[0], len(key)))
	if !ok || e.Status != vipalloc.Available {
		return nil
	}
	return e
}

// answerKind says what the responder did, for metrics.
type answerKind uint8

const (
	notOurs answerKind = iota
	answered
	truncated
)

// responder answers the names of the current table. It is shared by the UDP fast path and
// the kumavip plugin, so both give the same answers.
type responder struct {
	cur    atomic.Pointer[view]
	ttl    uint32
	search []string // lower-case search domains, without dots at either end
}

// answer appends to buf the complete response to q when q asks about a name we own
// (a hostname, a <hostname>.<search domain>, or the reverse name of a VIP), with at most
// limit bytes (TC and no records when it does not fit). It returns notOurs when the
// question belongs upstream.
func (r *responder) answer(q *query, buf []byte, limit int) ([]byte, answerKind) {
	if q.qtype == dns.TypeAXFR || q.qtype == dns.TypeIXFR {
		return buf, notOurs // the plugin refuses them for our names (handler.ServeDNS)
	}
	e, cname, ptr, cur := r.find(q)
	if e == nil {
		return buf, notOurs
	}
	start := len(buf)
	buf = r.build(buf, q, e, cname, ptr, cur.serial)
	if len(buf)-start <= limit {
		return buf, answered
	}
	if cname && q.qtype != dns.TypeCNAME {
		// Too big with the CNAME (a long hostname under a long search domain, no EDNS):
		// the same addresses owned by the name asked, without the CNAME, fit any buffer
		// (question + A + AAAA < 512). A client that does not retry over TCP (musl before
		// 1.2.4 uses a truncated answer as it is) then gets the addresses, not an empty TC.
		buf = r.build(buf[:start], q, e, false, false, cur.serial)
		if len(buf)-start <= limit {
			return buf, answered
		}
	}
	// Does not fit: header with TC, the question and the OPT record only (RFC 2181 9).
	buf = r.header(buf[:start], q)
	binary.BigEndian.PutUint16(buf[start+2:], binary.BigEndian.Uint16(buf[start+2:])|flagTC)
	buf = r.opt(buf, q)
	return buf, truncated
}

// find returns the entry q asks about, or nil when the name is not ours: cname when it was
// asked through a search domain (answered with a CNAME to the hostname first), ptr when it
// is the reverse name of a VIP.
func (r *responder) find(q *query) (e *vipalloc.Entry, cname, ptr bool, cur *view) {
	if q.qclass != dns.ClassINET && q.qclass != dns.ClassANY { // ANY: "*", it matches IN
		return nil, false, false, nil
	}
	var kb [maxName]byte
	key, ok := lowerKey(&kb, q.qname)
	if !ok {
		return nil, false, false, nil
	}
	if cur = r.cur.Load(); cur == nil {
		return nil, false, false, nil
	}
	if e = cur.lookup(key); e != nil {
		return e, false, false, cur
	}
	if ip, isRev := parseReverse(key); isRev {
		if e, ok = cur.table.LookupAddr(ip); !ok || e.Status != vipalloc.Available {
			return nil, false, false, nil
		}
		return e, false, true, cur
	}
	for _, sd := range r.search {
		if l := len(key) - len(sd) - 1; l > 0 && key[l] == '.' && string(key[l+1:]) == sd {
			if e = cur.lookup(key[:l]); e != nil {
				return e, true, false, cur
			}
		}
	}
	return nil, false, false, nil
}

// build appends the whole answer about e: through a search domain (cname: the CNAME to
// the hostname, then its addresses), a reverse name (ptr), or the hostname itself; NODATA
// (an SOA in the authority section) when e has no record of the type asked.
func (r *responder) build(buf []byte, q *query, e *vipalloc.Entry, cname, ptr bool, serial uint32) []byte {
	start := len(buf)
	buf = r.header(buf, q)
	var an, ns uint16
	soaOwner, soaLen := uint16(0xC00C), len(q.qname) // the NODATA SOA's owner (wire length)
	switch {
	case ptr:
		if q.qtype == dns.TypePTR || q.qtype == dns.TypeANY {
			buf = r.rrHead(buf, 0xC00C, dns.TypePTR)
			var hb [256]byte
			buf, an = appendNameRData(buf, servedName(hb[:0], e)), 1
		}
	case cname:
		buf = r.rrHead(buf, 0xC00C, dns.TypeCNAME)
		target := uint16(len(buf) - start + 2) // the CNAME's RDATA is the target's name
		var hb [256]byte
		host := servedName(hb[:0], e)
		buf = appendNameRData(buf, host)
		an = 1
		// a NODATA after the CNAME is about its target (RFC 2308 2.2): the SOA is the
		// target's, the same as a direct question for the hostname gets
		soaOwner, soaLen = 0xC000|target, len(host)+2
		if q.qtype != dns.TypeCNAME {
			var k uint16
			buf, k = r.addresses(buf, 0xC000|target, q.qtype, e)
			an += k
		}
	default:
		buf, an = r.addresses(buf, 0xC00C, q.qtype, e)
	}
	if an == 0 || (cname && an == 1 && q.qtype != dns.TypeCNAME) {
		// NODATA: the name is ours but has no record of this type. The SOA lets
		// caching resolvers cache the negative answer for TTL seconds (RFC 2308).
		buf = r.soa(buf, serial, soaOwner, soaLen)
		if q.qtype == dns.TypeSOA {
			an++ // that SOA is the name's own record: asked for, it is the answer
		} else {
			ns = 1
		}
	}
	buf = r.opt(buf, q)
	binary.BigEndian.PutUint16(buf[start+6:], an)
	binary.BigEndian.PutUint16(buf[start+8:], ns)
	return buf
}

// header appends the response header and the question, echoed as the client wrote it.
// An answer to class ANY is not authoritative (RFC 1034 3.7.1: a server cannot know it
// holds every class).
func (r *responder) header(b []byte, q *query) []byte {
	b = be16(b, q.id)
	flags := flagQR | flagRA | q.flags&(flagRD|flagCD)
	if q.qclass == dns.ClassINET {
		flags |= flagAA
	}
	b = be16(b, flags)
	var ar uint16
	if q.edns {
		ar = 1
	}
	b = append(b, 0, 1, 0, 0, 0, 0, byte(ar>>8), byte(ar))
	b = append(b, q.qname...)
	b = be16(b, q.qtype)
	return be16(b, q.qclass)
}

// rrHead appends owner (a compression pointer), type, class and TTL.
func (r *responder) rrHead(b []byte, owner, typ uint16) []byte {
	b = be16(b, owner)
	b = be16(b, typ)
	b = be16(b, dns.ClassINET)
	return be32(b, r.ttl)
}

// appendNameRData appends RDLENGTH and an RDATA holding one uncompressed name.
func appendNameRData[S string | []byte](b []byte, host S) []byte {
	at := len(b)
	b = appendName(append(b, 0, 0), host)
	binary.BigEndian.PutUint16(b[at:], uint16(len(b)-at-2))
	return b
}

// canonical is the form hostnames are served in: lower case, no final dot. It does not
// allocate for names that already are.
func canonical(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// servedName appends e's hostname in canonical form to b (a default name's is built there:
// the entry keeps no string of it).
func servedName(b []byte, e *vipalloc.Entry) []byte {
	start := len(b)
	b = e.AppendHostname(b)
	h := b[start:]
	canon := len(h) == 0 || h[len(h)-1] != '.'
	for _, ch := range h {
		canon = canon && !('A' <= ch && ch <= 'Z' || ch >= 0x80)
	}
	if !canon {
		return append(b[:start], canonical(string(h))...)
	}
	return b
}

// addresses appends the A and/or AAAA records of e that qtype asks for.
func (r *responder) addresses(b []byte, owner, qtype uint16, e *vipalloc.Entry) ([]byte, uint16) {
	var n uint16
	// Each address is worked out (IPv6: from the twin prefix) only when asked for.
	if qtype == dns.TypeA || qtype == dns.TypeANY {
		if v4 := e.IPv4(); v4.IsValid() {
			a := v4.As4()
			b = r.rrHead(b, owner, dns.TypeA)
			b = append(append(b, 0, 4), a[:]...)
			n++
		}
	}
	if qtype == dns.TypeAAAA || qtype == dns.TypeANY {
		if v6 := e.IPv6(); v6.IsValid() {
			a := v6.As16()
			b = r.rrHead(b, owner, dns.TypeAAAA)
			b = append(append(b, 0, 16), a[:]...)
			n++
		}
	}
	return b, n
}

// soa appends the authority SOA of a NODATA answer, owned by the name the compression
// pointer owner points to (nameLen wire bytes), which is also its MNAME. RNAME is
// hostmaster.<name>, or the name itself when that would pass the 255-byte limit of a name
// (RFC 1035 2.3.4): a longer one makes the whole answer unparseable.
func (r *responder) soa(b []byte, serial uint32, owner uint16, nameLen int) []byte {
	const hostmaster = "\x0ahostmaster"
	b = r.rrHead(b, owner, dns.TypeSOA)
	long := nameLen+len(hostmaster) > maxName
	if long {
		b = append(b, 0, 24)
	} else {
		b = append(b, 0, 35)
	}
	b = be16(b, owner) // MNAME: the name itself
	if !long {
		b = append(b, hostmaster...) // RNAME: hostmaster.<name>
	}
	b = be16(b, owner)
	b = be32(b, serial)
	b = be32(b, 3600)     // refresh
	b = be32(b, 600)      // retry
	b = be32(b, 86400)    // expire
	return be32(b, r.ttl) // minimum: negative answers live as long as positive ones
}

// opt appends our OPT record when the client sent one (RFC 6891 7), echoing DO (RFC 3225).
func (r *responder) opt(b []byte, q *query) []byte {
	if !q.edns {
		return b
	}
	var flags uint16
	if q.do {
		flags = ednsDO
	}
	b = append(b, 0)
	b = be16(b, dns.TypeOPT)
	b = be16(b, ednsUDPSize)
	b = append(b, 0, 0) // extended rcode, version
	b = be16(b, flags)
	return append(b, 0, 0)
}

// parseReverse turns "4.3.2.1.in-addr.arpa" or a 32-nibble "...ip6.arpa" name into the
// address it names.
func parseReverse(key []byte) (netip.Addr, bool) {
	const v4, v6 = ".in-addr.arpa", ".ip6.arpa"
	switch {
	case len(key) > len(v4) && string(key[len(key)-len(v4):]) == v4:
		var a [4]byte
		rest := key[:len(key)-len(v4)]
		for i := 3; i >= 0; i-- {
			v, n := 0, 0
			for n < len(rest) && rest[n] != '.' {
				c := rest[n]
				if c < '0' || c > '9' || n == 3 || (n > 0 && rest[0] == '0') {
					return netip.Addr{}, false
				}
				v = v*10 + int(c-'0')
				n++
			}
			if n == 0 || v > 255 {
				return netip.Addr{}, false
			}
			a[i] = byte(v)
			rest = rest[n:]
			if i > 0 {
				if len(rest) == 0 || rest[0] != '.' {
					return netip.Addr{}, false
				}
				rest = rest[1:]
			}
		}
		if len(rest) != 0 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4(a), true
	case len(key) == 64+len(v6)-1 && string(key[len(key)-len(v6):]) == v6:
		var a [16]byte
		for i := 0; i < 32; i++ {
			c, sep := key[2*i], key[2*i+1]
			if sep != '.' {
				return netip.Addr{}, false
			}
			var v byte
			switch {
			case c >= '0' && c <= '9':
				v = c - '0'
			case c >= 'a' && c <= 'f':
				v = c - 'a' + 10
			default:
				return netip.Addr{}, false
			}
			// nibble i (from the left) is the (31-i)th nibble of the address
			j := 31 - i
			if j%2 == 0 {
				a[j/2] |= v << 4
			} else {
				a[j/2] |= v
			}
		}
		return netip.AddrFrom16(a), true
	}
	return netip.Addr{}, false
}
