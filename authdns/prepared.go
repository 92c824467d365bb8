package authdns

import (
	"encoding/binary"
	"strings"

	"github.com/miekg/dns"
)

// The prepared form of a catalog answers standard queries straight from the packet: every
// record is kept as the bytes it has on the wire after its owner name (type, class, TTL,
// length, data), names are keyed by their lower-case wire form, and an answer is the query's
// header and question followed by records whose owners are compression pointers to the
// name already written. No message is built, no name converted, nothing allocated; the
// address set's rotation is an index. Catalog.Answer stays the reference (the tests check
// that both give the same answers) and answers what this form leaves to it.

// wireNode is one owner name: its record tails by type, in set order.
type wireNode struct {
	sets map[uint16][][]byte
}

// wireZone is a Zone's prepared form.
type wireZone struct {
	z     *Zone
	nodes map[string]*wireNode // lower-case wire name -> node
	// negSOA is the whole SOA record of a negative answer (owner included).
	negSOA []byte
	// origin is the zone's lower-case wire name.
	origin string
	// glue is the whole A and AAAA records of the apex's name servers inside the zone, the
	// additional section of an NS answer at the apex; nglue how many.
	glue  []byte
	nglue int
}

// tail is rr's wire form after its owner name.
func tail(rr dns.RR) []byte {
	b := packed(rr)
	if b == nil {
		return nil
	}
	owner, _ := dns.PackDomainName(rr.Header().Name, make([]byte, 256), 0, nil, false)
	return b[owner:]
}

// packed is rr's wire form, rr left as it is: rr is packed as the one answer of a message
// whose 12-byte header is then cut off. dns.PackRR writes the record's Rdlength, and a zone
// kept from the catalog before (a held serial) is prepared again while that catalog may be
// sending it in a zone transfer.
func packed(rr dns.RR) []byte {
	m := dns.Msg{Answer: []dns.RR{rr}}
	b, err := m.Pack()
	if err != nil || len(b) < 12 {
		return nil
	}
	return b[12:]
}

func wireName(name string) string {
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(strings.ToLower(name), buf, 0, nil, false)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// prepare builds the zone's prepared form.
func (z *Zone) prepare() *wireZone {
	wz := &wireZone{z: z, nodes: make(map[string]*wireNode, len(z.nodes)), origin: wireName(z.Origin)}
	for name, n := range z.nodes {
		wn := &wireNode{sets: make(map[uint16][][]byte, len(n.sets))}
		for t, set := range n.sets {
			for _, rr := range set {
				if cn, ok := rr.(*dns.CNAME); ok && cn.Target != strings.ToLower(cn.Target) {
					c := *cn // chased by its lower-case wire name, which owns what follows
					c.Target = strings.ToLower(c.Target)
					rr = &c
				}
				if b := tail(rr); b != nil {
					wn.sets[t] = append(wn.sets[t], b)
				}
			}
		}
		wz.nodes[wireName(name)] = wn
	}
	if apex := z.nodes[z.Origin]; apex != nil {
		for _, rr := range z.glue(apex.sets[dns.TypeNS]) {
			if b := packed(rr); b != nil {
				wz.glue = append(wz.glue, b...)
				wz.nglue++
			}
		}
	}
	wz.negSOA = packed(z.negativeSOA())
	return wz
}

// prepare builds the catalog's prepared form (Build and NewCatalog call it) from its zones'
// own, each made once (Zone.wire): a zone is prepared before the catalog is published, by
// the one goroutine building it.
func (c *Catalog) prepare() {
	c.wire = make(map[string]*wireZone, len(c.zones))
	for o, z := range c.zones {
		if z.wire == nil {
			z.wire = z.prepare()
		}
		c.wire[wireName(o)] = z.wire
	}
}

// findWire is the zone holding the lower-case wire name: the longest origin that is name or
// one of its ancestors.
func (c *Catalog) findWire(name []byte) *wireZone {
	for off := 0; off < len(name); {
		if wz := c.wire[string(name[off:])]; wz != nil {
			return wz
		}
		if name[off] == 0 {
			break
		}
		off += 1 + int(name[off])
	}
	return nil
}

// lookup is Zone.lookup on wire names: the node answering name (exactly, or its wildcard
// per RFC 4592), or nil for NXDOMAIN.
func (wz *wireZone) lookup(name []byte, scratch *[256]byte) *wireNode {
	if n := wz.nodes[string(name)]; n != nil {
		return n
	}
	// The closest encloser: the longest existing ancestor (the origin at worst).
	ce := 0
	for {
		if name[ce] == 0 {
			return nil
		}
		ce += 1 + int(name[ce])
		rest := name[ce:]
		if wz.nodes[string(rest)] != nil || string(rest) == wz.origin {
			break
		}
	}
	scratch[0], scratch[1] = 1, '*'
	n := copy(scratch[2:], name[ce:])
	return wz.nodes[string(scratch[:2+n])]
}

// Wire constants (RFC 1035, RFC 6891).
const (
	headerLen = 12
	flagQR    = 1 << 15
	flagAA    = 1 << 10
	flagTC    = 1 << 9
	flagRD    = 1 << 8
	flagZ     = 1 << 6
	flagCD    = 1 << 4
)

// AppendAnswer appends to out the answer to the query packet p when the prepared form can
// give it - a standard query, one question of class IN, no records but one plain OPT, a
// type other than ANY or a transfer, an answer that fits limit (the client's UDP size when
// udp) - and reports whether it did; otherwise the caller answers with Reply.
func (c *Catalog) AppendAnswer(out, p []byte, udp bool) ([]byte, int, bool) {
	if c == nil {
		return out, 0, false
	}
	var lname, scratch [256]byte
	q, ok := parseQuery(p, udp, &lname)
	if !ok {
		return out, 0, false
	}
	a := answer{out: append(out, p[:q.end]...), start: len(out)} // header and question as asked (case kept)
	name := lname[:q.nameLen]
	wz := c.findWire(name)
	if wz == nil {
		a.setFlags(flagQR | q.flags&(flagRD|flagCD))
		a.rcode = dns.RcodeRefused
		return a.finish(q)
	}
	a.setFlags(flagQR | flagAA | q.flags&(flagRD|flagCD))
	c.chase(&a, wz, name, q.qtype, &scratch)
	return a.finish(q)
}

// query is what AppendAnswer reads of a query packet.
type query struct {
	flags   uint16
	qtype   uint16
	nameLen int  // of the lower-cased question name
	end     int  // of the question: header and question are p[:end]
	edns    bool // an OPT record came
	do      bool // its DO bit
	limit   int  // the largest answer allowed
}

// parseQuery reads p's header, question (its name lower-cased into lname) and OPT record,
// or reports that the prepared form does not answer p.
func parseQuery(p []byte, udp bool, lname *[256]byte) (query, bool) {
	var q query
	if len(p) < headerLen+5 {
		return q, false
	}
	q.flags = binary.BigEndian.Uint16(p[2:])
	if q.flags&(flagQR|0x7800|flagTC|flagZ) != 0 || binary.BigEndian.Uint16(p[4:]) != 1 ||
		binary.BigEndian.Uint16(p[6:]) != 0 || binary.BigEndian.Uint16(p[8:]) != 0 {
		return q, false
	}
	arcount := binary.BigEndian.Uint16(p[10:])
	if arcount > 1 {
		return q, false
	}
	off, ok := readName(p, lname)
	if !ok || off+4 > len(p) {
		return q, false
	}
	q.nameLen = off - headerLen
	q.qtype = binary.BigEndian.Uint16(p[off:])
	if binary.BigEndian.Uint16(p[off+2:]) != dns.ClassINET || !preparedType(q.qtype) {
		return q, false
	}
	q.end = off + 4
	q.limit = 65535
	if udp {
		q.limit = dns.MinMsgSize
	}
	if arcount == 0 {
		return q, q.end == len(p)
	}
	return q, q.readOPT(p, udp)
}

// readName copies the question's name, lower-cased, into lname and returns where the name
// ends in p, or false for a name that is not plain labels within 255 bytes.
func readName(p []byte, lname *[256]byte) (int, bool) {
	off, n := headerLen, 0
	for {
		if off >= len(p) {
			return 0, false
		}
		l := int(p[off])
		if l > 63 || off+1+l > len(p) || n+1+l >= 255 {
			return 0, false
		}
		lname[n] = byte(l)
		for i := 1; i <= l; i++ {
			b := p[off+i]
			if b >= 'A' && b <= 'Z' {
				b += 'a' - 'A'
			}
			lname[n+i] = b
		}
		n += 1 + l
		off += 1 + l
		if l == 0 {
			return off, true
		}
	}
}

// preparedType reports whether the prepared form answers questions of type t: not the
// meta-types, which Reply answers or refuses.
func preparedType(t uint16) bool {
	switch t {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeMAILA, dns.TypeMAILB, dns.TypeTSIG, dns.TypeTKEY:
		return false
	}
	return true
}

// readOPT reads the OPT record after the question, the packet's last record: root name,
// type 41, class = UDP size, TTL = ext-rcode|version|flags, RDATA. Only version 0 with
// no extended rcode is answered here.
func (q *query) readOPT(p []byte, udp bool) bool {
	o := q.end
	if o+11 > len(p) || p[o] != 0 || binary.BigEndian.Uint16(p[o+1:]) != dns.TypeOPT || p[o+5] != 0 || p[o+6] != 0 ||
		o+11+int(binary.BigEndian.Uint16(p[o+9:])) != len(p) {
		return false
	}
	q.edns, q.do = true, p[o+7]&0x80 != 0
	if udp {
		q.limit = min(max(int(binary.BigEndian.Uint16(p[o+3:])), dns.MinMsgSize), ednsSize)
	}
	return true
}

// answer is an answer being written after the query's header and question.
type answer struct {
	out   []byte
	start int // where the answer's header is in out
	// owner is where the current name sits in the answer (0: not written yet).
	owner      int
	an, ns, ar int
	rcode      int
}

func (a *answer) setFlags(f uint16) { binary.BigEndian.PutUint16(a.out[a.start+2:], f) }

// chase writes the answer to name's qtype in wz, following CNAMEs through the catalog's
// zones: at most maxChase names (a longer chain is a failure), stopping at a loop or at a
// target outside the catalog, which the resolver follows.
func (c *Catalog) chase(a *answer, wz *wireZone, name []byte, qtype uint16, scratch *[256]byte) {
	var seen [maxChase][]byte
	for hop := range maxChase {
		seen[hop] = name
		node := wz.lookup(name, scratch)
		if node == nil {
			a.negative(wz, dns.RcodeNameError)
			return
		}
		cn := node.sets[dns.TypeCNAME]
		if qtype == dns.TypeCNAME || len(cn) == 0 {
			a.appendSet(wz, node.sets[qtype], name, qtype)
			return
		}
		target := a.appendCNAME(name, cn[0])
		if seenName(seen[:hop+1], target) {
			return // a loop
		}
		if wz = c.findWire(target); wz == nil {
			return
		}
		name = target
	}
	a.rcode = dns.RcodeServerFailure
}

// seenName reports whether name is one of seen.
func seenName(seen [][]byte, name []byte) bool {
	for _, s := range seen {
		if string(s) == string(name) {
			return true
		}
	}
	return false
}

// negative writes the zone's SOA in the authority section, with rcode.
func (a *answer) negative(wz *wireZone, rcode int) {
	a.out = append(a.out, wz.negSOA...)
	a.ns, a.rcode = 1, rcode
}

// appendCNAME writes name's CNAME record (the tail cn) and returns its target, as written:
// the owner of what follows.
func (a *answer) appendCNAME(name, cn []byte) []byte {
	a.appendOwner(name)
	a.out = append(a.out, cn...)
	a.an++
	target := a.out[len(a.out)-len(cn)+10:]
	a.owner = len(a.out) - len(target) - a.start
	return target
}

// appendSet writes name's records of set, rotated, or the zone's SOA when there are none;
// an NS answer at the apex carries its glue (RFC 1035 3.3.11).
func (a *answer) appendSet(wz *wireZone, set [][]byte, name []byte, qtype uint16) {
	if len(set) == 0 {
		a.negative(wz, dns.RcodeSuccess)
		return
	}
	k := 0
	if len(set) > 1 {
		k = int(rotation.Add(1) % uint32(len(set)))
	}
	for i := range set {
		a.appendOwner(name)
		a.out = append(a.out, set[(i+k)%len(set)]...)
	}
	a.an += len(set)
	if qtype == dns.TypeNS && string(name) == wz.origin {
		a.out = append(a.out, wz.glue...)
		a.ar = wz.nglue
	}
}

// appendOwner writes name as a record's owner: a pointer when it is in the message already.
func (a *answer) appendOwner(name []byte) {
	if a.owner > 0 && a.owner < 0x3fff {
		a.out = append(a.out, 0xc0|byte(a.owner>>8), byte(a.owner))
		return
	}
	a.owner = len(a.out) - a.start
	a.out = append(a.out, name...)
}

// finish sets the counts and appends the OPT record when the query had one; an answer over
// the query's limit is withdrawn (Reply truncates it as the RFCs say).
func (a *answer) finish(q query) ([]byte, int, bool) {
	h := a.out[a.start:]
	binary.BigEndian.PutUint16(h[2:], binary.BigEndian.Uint16(h[2:])&^0xf|uint16(a.rcode))
	binary.BigEndian.PutUint16(h[6:], uint16(a.an))
	binary.BigEndian.PutUint16(h[8:], uint16(a.ns))
	binary.BigEndian.PutUint16(h[10:], uint16(a.ar))
	if q.edns {
		binary.BigEndian.PutUint16(h[10:], uint16(a.ar+1))
		var doBit byte
		if q.do {
			doBit = 0x80 // echoed (RFC 3225 3)
		}
		a.out = append(a.out, 0, 0, 41, ednsSize>>8, ednsSize&0xff, 0, 0, doBit, 0, 0, 0)
	}
	if len(a.out)-a.start > q.limit {
		return a.out[:a.start], 0, false
	}
	return a.out, a.rcode, true
}
