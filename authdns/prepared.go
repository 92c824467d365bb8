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
	buf := make([]byte, dns.Len(rr)+2)
	n, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		return nil
	}
	owner, _ := dns.PackDomainName(rr.Header().Name, make([]byte, 256), 0, nil, false)
	return buf[owner:n]
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
			buf := make([]byte, dns.Len(rr)+2)
			if n, err := dns.PackRR(rr, buf, 0, nil, false); err == nil {
				wz.glue = append(wz.glue, buf[:n]...)
				wz.nglue++
			}
		}
	}
	soa := z.negativeSOA()
	buf := make([]byte, dns.Len(soa)+2)
	if n, err := dns.PackRR(soa, buf, 0, nil, false); err == nil {
		wz.negSOA = buf[:n]
	}
	return wz
}

// prepare builds the catalog's prepared form (Build and NewCatalog call it).
func (c *Catalog) prepare() {
	c.wire = make(map[string]*wireZone, len(c.zones))
	for o, z := range c.zones {
		c.wire[wireName(o)] = z.prepare()
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
	if c == nil || len(p) < headerLen+5 {
		return out, 0, false
	}
	flags := binary.BigEndian.Uint16(p[2:])
	if flags&(flagQR|0x7800|flagTC|flagZ) != 0 || binary.BigEndian.Uint16(p[4:]) != 1 ||
		binary.BigEndian.Uint16(p[6:]) != 0 || binary.BigEndian.Uint16(p[8:]) != 0 {
		return out, 0, false
	}
	if binary.BigEndian.Uint16(p[10:]) > 1 {
		return out, 0, false
	}
	// The question, its name lower-cased into lname.
	var lname, scratch [256]byte
	off, n := headerLen, 0
	for {
		if off >= len(p) {
			return out, 0, false
		}
		l := int(p[off])
		if l > 63 || off+1+l > len(p) || n+1+l >= 255 {
			return out, 0, false
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
			break
		}
	}
	if off+4 > len(p) {
		return out, 0, false
	}
	qtype, qclass := binary.BigEndian.Uint16(p[off:]), binary.BigEndian.Uint16(p[off+2:])
	qend := off + 4
	switch {
	case qclass != dns.ClassINET:
		return out, 0, false
	case qtype == dns.TypeANY || qtype == dns.TypeAXFR || qtype == dns.TypeIXFR || qtype == dns.TypeOPT ||
		qtype == dns.TypeMAILA || qtype == dns.TypeMAILB || qtype == dns.TypeTSIG || qtype == dns.TypeTKEY:
		return out, 0, false
	}
	limit := 65535
	if udp {
		limit = dns.MinMsgSize
	}
	edns, do := false, false
	if binary.BigEndian.Uint16(p[10:]) == 1 {
		// OPT: root name, type 41, class = UDP size, TTL = ext-rcode|version|flags, RDATA.
		o := qend
		if o+11 > len(p) || p[o] != 0 || binary.BigEndian.Uint16(p[o+1:]) != dns.TypeOPT || p[o+5] != 0 || p[o+6] != 0 ||
			o+11+int(binary.BigEndian.Uint16(p[o+9:])) != len(p) {
			return out, 0, false
		}
		edns, do = true, p[o+7]&0x80 != 0
		if udp {
			limit = min(max(int(binary.BigEndian.Uint16(p[o+3:])), dns.MinMsgSize), ednsSize)
		}
	} else if qend != len(p) {
		return out, 0, false
	}

	start := len(out)
	out = append(out, p[:qend]...) // header and question as asked (case kept)
	h := out[start:]
	binary.BigEndian.PutUint16(h[2:], flagQR|flags&(flagRD|flagCD))
	name := lname[:n]
	wz := c.findWire(name)
	if wz == nil {
		return finishAnswer(out, start, do, 0, 0, 0, edns, limit, dns.RcodeRefused)
	}
	binary.BigEndian.PutUint16(h[2:], flagQR|flagAA|flags&(flagRD|flagCD))
	// ownerPtr: where the current name sits in the answer (0: not written yet).
	ownerPtr := 0
	var seen [maxChase][]byte
	ancount, nscount, arcount, rcode := 0, 0, 0, dns.RcodeSuccess
	for hop := 0; ; hop++ {
		if hop == maxChase {
			return finishAnswer(out, start, do, ancount, 0, 0, edns, limit, dns.RcodeServerFailure)
		}
		seen[hop] = name
		node := wz.lookup(name, &scratch)
		if node == nil {
			rcode = dns.RcodeNameError
			out = append(out, wz.negSOA...)
			nscount = 1
			break
		}
		if cn := node.sets[dns.TypeCNAME]; qtype != dns.TypeCNAME && len(cn) > 0 {
			out, ownerPtr = appendOwner(out, start, ownerPtr, name)
			out = append(out, cn[0]...)
			ancount++
			target := out[len(out)-len(cn[0])+10:]
			for _, s := range seen[:hop+1] {
				if string(s) == string(target) {
					return finishAnswer(out, start, do, ancount, 0, 0, edns, limit, dns.RcodeSuccess) // a loop
				}
			}
			nz := c.findWire(target)
			if nz == nil {
				return finishAnswer(out, start, do, ancount, 0, 0, edns, limit, dns.RcodeSuccess) // outside: the resolver follows
			}
			wz, name, ownerPtr = nz, target, len(out)-len(target)-start
			continue
		}
		set := node.sets[qtype]
		if len(set) == 0 {
			out = append(out, wz.negSOA...)
			nscount = 1
			break
		}
		k := 0
		if len(set) > 1 {
			k = int(rotation.Add(1) % uint32(len(set)))
		}
		for i := range set {
			out, ownerPtr = appendOwner(out, start, ownerPtr, name)
			out = append(out, set[(i+k)%len(set)]...)
		}
		ancount += len(set)
		if qtype == dns.TypeNS && string(name) == wz.origin {
			out = append(out, wz.glue...) // RFC 1035 3.3.11
			arcount = wz.nglue
		}
		break
	}
	return finishAnswer(out, start, do, ancount, nscount, arcount, edns, limit, rcode)
}

// appendOwner writes name as a record's owner: a pointer when it is in the message already.
func appendOwner(out []byte, start, ptr int, name []byte) ([]byte, int) {
	if ptr > 0 && ptr < 0x3fff {
		return append(out, 0xc0|byte(ptr>>8), byte(ptr)), ptr
	}
	return append(out, name...), len(out) - start
}

// finishAnswer sets the counts and appends the OPT record when the query had one; an answer
// over limit is withdrawn (Reply truncates it as the RFCs say).
func finishAnswer(out []byte, start int, do bool, an, ns, ar int, edns bool, limit, rcode int) ([]byte, int, bool) {
	h := out[start:]
	binary.BigEndian.PutUint16(h[2:], binary.BigEndian.Uint16(h[2:])&^0xf|uint16(rcode))
	binary.BigEndian.PutUint16(h[6:], uint16(an))
	binary.BigEndian.PutUint16(h[8:], uint16(ns))
	binary.BigEndian.PutUint16(h[10:], uint16(ar))
	if edns {
		binary.BigEndian.PutUint16(h[10:], uint16(ar+1))
		var doBit byte
		if do {
			doBit = 0x80 // echoed (RFC 3225 3)
		}
		out = append(out, 0, 0, 41, ednsSize>>8, ednsSize&0xff, 0, 0, doBit, 0, 0, 0)
	}
	if len(out)-start > limit {
		return out[:start], 0, false
	}
	return out, rcode, true
}
