package dnsserver

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// DNS wire constants used by the fast path (RFC 1035, RFC 6891) that miekg/dns does not
// export; record types, the class and message sizes are miekg/dns's (dns.TypeA, ...).
const (
	headerLen = 12
	maxName   = 255 // wire length of a name, final zero byte included

	flagQR = 1 << 15
	flagAA = 1 << 10
	flagTC = 1 << 9
	flagRD = 1 << 8
	flagRA = 1 << 7
	flagZ  = 1 << 6
	flagCD = 1 << 4

	ednsDO      = 1 << 15
	ednsZ       = 1<<15 - 1 // the EDNS flags after DO: zero in what we send (RFC 6891 6.1.4)
	ednsUDPSize = 1232      // payload size we advertise (DNS flag day 2020)
)

// query is one question as the responder needs it, parsed either from a raw packet (the
// UDP fast path) or from a *dns.Msg (the plugin). qname aliases the caller's memory.
type query struct {
	id      uint16
	flags   uint16 // the request's header flags (only RD and CD are echoed)
	qname   []byte // wire format as the client sent it (case preserved), final zero included
	qtype   uint16
	qclass  uint16
	edns    bool
	udpSize uint16
	do      bool
}

// limit is the largest answer the client accepts over UDP (RFC 6891 6.2.5: below 512
// means 512).
func (q *query) limit() int {
	if !q.edns || q.udpSize < dns.MinMsgSize {
		return dns.MinMsgSize
	}
	return int(q.udpSize)
}

// parseQuery reads a standard query with exactly one question, no answer or authority
// records and at most one OPT record of EDNS version 0, and nothing after it. It returns
// false for anything else (other opcodes, responses, compression in the question, other
// EDNS versions, TSIG, trailing bytes, ...): such packets take CoreDNS's full path, which
// answers FORMERR, NOTIMP or BADVERS as the RFCs say.
func parseQuery(p []byte, q *query) bool {
	if len(p) < headerLen+1+4 {
		return false
	}
	flags := binary.BigEndian.Uint16(p[2:])
	// QR=0, opcode QUERY, not truncated, Z clear.
	if flags&(flagQR|0x7800|flagTC|flagZ) != 0 {
		return false
	}
	if binary.BigEndian.Uint16(p[4:]) != 1 || binary.BigEndian.Uint16(p[6:]) != 0 ||
		binary.BigEndian.Uint16(p[8:]) != 0 {
		return false
	}
	arcount := binary.BigEndian.Uint16(p[10:])
	if arcount > 1 {
		return false
	}
	off := headerLen
	for {
		if off >= len(p) {
			return false
		}
		l := int(p[off])
		if l == 0 {
			off++
			break
		}
		if l > 63 { // compression pointer or reserved label type
			return false
		}
		off += 1 + l
		if off-headerLen >= maxName {
			return false
		}
	}
	if off+4 > len(p) {
		return false
	}
	q.id = binary.BigEndian.Uint16(p[0:])
	q.flags = flags
	q.qname = p[headerLen:off]
	q.qtype = binary.BigEndian.Uint16(p[off:])
	q.qclass = binary.BigEndian.Uint16(p[off+2:])
	off += 4
	q.edns, q.udpSize, q.do = false, 0, false
	if arcount == 0 {
		return off == len(p)
	}
	// OPT: root name, type 41, class = UDP size, TTL = ext-rcode|version|flags, RDATA.
	if off+11 > len(p) || p[off] != 0 || binary.BigEndian.Uint16(p[off+1:]) != dns.TypeOPT {
		return false
	}
	if p[off+5] != 0 || p[off+6] != 0 { // extended rcode and version must be 0
		return false
	}
	q.edns = true
	q.udpSize = binary.BigEndian.Uint16(p[off+3:])
	q.do = binary.BigEndian.Uint16(p[off+7:])&ednsDO != 0
	rdlen := int(binary.BigEndian.Uint16(p[off+9:]))
	off += 11
	if off+rdlen != len(p) {
		return false
	}
	for end := off + rdlen; off < end; { // options must be well-formed TLVs
		if off+4 > end {
			return false
		}
		off += 4 + int(binary.BigEndian.Uint16(p[off+2:]))
	}
	return off == len(p)
}

// lowerKey writes the lower-case presentation form of a wire name, without the final dot,
// into dst ("Backend.Mesh." -> "backend.mesh"). It returns false for names that cannot be
// one of ours (a label holding a dot, a space or a non-ASCII byte, or the root).
func lowerKey(dst *[maxName]byte, name []byte) ([]byte, bool) {
	n := 0
	for i := 0; i < len(name); {
		l := int(name[i])
		if l == 0 {
			break
		}
		if i+1+l > len(name) {
			return nil, false
		}
		if n > 0 {
			dst[n] = '.'
			n++
		}
		for _, c := range name[i+1 : i+1+l] {
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
			case c <= ' ' || c == '.' || c >= 0x7f:
				return nil, false
			}
			if n >= len(dst) {
				return nil, false
			}
			dst[n] = c
			n++
		}
		i += 1 + l
	}
	if n == 0 {
		return nil, false
	}
	return dst[:n], true
}

// appendName appends the wire form of a valid lower-case hostname (no final dot).
func appendName[S string | []byte](b []byte, host S) []byte {
	start := len(b)
	b = append(b, 0)
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			b[start] = byte(len(b) - start - 1)
			start = len(b)
			b = append(b, 0)
			continue
		}
		b = append(b, host[i])
	}
	b[start] = byte(len(b) - start - 1)
	return append(b, 0)
}

func be16(b []byte, v uint16) []byte { return append(b, byte(v>>8), byte(v)) }

func be32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// reject appends the answer to the query p that miekg/dns would send before CoreDNS sees
// it, when it would lose something: NOTIMP to an opcode other than QUERY and NOTIFY without
// exactly one question (DSO, RFC 8490: CoreDNS's listener, which lets the other opcodes
// through to the handler with one question, would answer FORMERR), and FORMERR to a query
// with an OPT record it cannot take (zero or several questions, more records than a query
// has, or an unpackable record: an EDNS option overrunning its OPT, ...), which miekg/dns
// answers without the OPT. The answer is a header (id, opcode, RD and CD kept) plus an OPT
// when the query has one: RFC 6891 6.1.1 and 7, an answer to a query with an OPT has one,
// a FORMERR about the OPT included, so the client can tell it from a server without EDNS.
// It returns false for everything else; the UDP fast path calls it only for packets
// parseQuery did not take.
func reject(b, p []byte) ([]byte, bool) {
	if len(p) < headerLen {
		return b, false
	}
	flags := binary.BigEndian.Uint16(p[2:])
	at := findOPT(p)
	rcode := dns.RcodeFormatError
	switch op := flags >> 11 & 0xF; {
	case flags&flagQR != 0:
		return b, false // a response: ignored
	case op != dns.OpcodeQuery && op != dns.OpcodeNotify && binary.BigEndian.Uint16(p[4:]) != 1:
		rcode = dns.RcodeNotImplemented
	case at < 0 || accepted(p) && new(dns.Msg).Unpack(p) == nil:
		return b, false // no OPT, or miekg/dns serves it
	}
	b = be16(b, binary.BigEndian.Uint16(p))
	b = be16(b, flagQR|flags&(0x7800|flagRD|flagCD)|uint16(rcode))
	if at < 0 {
		return append(b, 0, 0, 0, 0, 0, 0, 0, 0), true
	}
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 1)
	return (&responder{}).opt(b, &query{edns: true, do: p[at+6]&(ednsDO>>8) != 0}), true
}

// badVers appends the BADVERS answer to the query p when its OPT has a version other than
// 0 and miekg/dns takes it (CoreDNS answers it then, with an OPT of payload size 0 and
// without the DO bit): the question, and an OPT of version 0 with our payload size and the
// DO bit copied (RFC 6891 6.1.3, RFC 3225 3). It returns false for everything else.
func badVers(b, p []byte) ([]byte, bool) {
	at := findOPT(p)
	if at < 0 || p[at+5] == 0 || !accepted(p) { // p[at+5]: the version
		return b, false
	}
	m := new(dns.Msg)
	if m.Unpack(p) != nil {
		return b, false
	}
	r := new(dns.Msg)
	r.SetRcode(m, dns.RcodeBadVers) // the low 4 bits here, the rest in the OPT
	r.SetEdns0(ednsUDPSize, p[at+6]&(ednsDO>>8) != 0)
	out, err := r.Pack()
	if err != nil {
		return b, false
	}
	return append(b, out...), true
}

// accepted says whether miekg/dns's listener takes the query p to CoreDNS (when it unpacks):
// dns.DefaultMsgAcceptFunc, and the other opcodes, which setup allows, with one question
// and any records.
func accepted(p []byte) bool {
	var n [4]int // questions, answers, authority, additional
	for i := range n {
		n[i] = int(binary.BigEndian.Uint16(p[4+2*i:]))
	}
	if op := binary.BigEndian.Uint16(p[2:]) >> 11 & 0xF; op == dns.OpcodeQuery || op == dns.OpcodeNotify {
		return n[0] == 1 && n[1] <= 1 && n[2] <= 1 && n[3] <= 2
	}
	return n[0] == 1
}

// findOPT returns the offset of the TYPE of the first OPT record in the additional section
// of the query p (its fixed part is whole from there), or -1: for a response, a packet
// without one, or one cut short before it.
func findOPT(p []byte) int {
	if len(p) < headerLen || binary.BigEndian.Uint16(p[2:])&flagQR != 0 {
		return -1
	}
	var n [4]int
	for i := range n {
		n[i] = int(binary.BigEndian.Uint16(p[4+2*i:]))
	}
	off := headerLen
	for i := 0; i < n[0]; i++ {
		if off = skipName(p, off) + 4; off < 4 {
			return -1
		}
	}
	for i := 0; i < n[1]+n[2]+n[3]; i++ {
		if off = skipName(p, off); off < 0 || off+10 > len(p) {
			return -1
		}
		if i >= n[1]+n[2] && binary.BigEndian.Uint16(p[off:]) == dns.TypeOPT {
			return off
		}
		off += 10 + int(binary.BigEndian.Uint16(p[off+8:]))
	}
	return -1
}

// skipName returns the offset after the (possibly compressed) name at off, or -1.
func skipName(p []byte, off int) int {
	for off < len(p) {
		switch l := int(p[off]); {
		case l == 0:
			return off + 1
		case l&0xC0 == 0xC0:
			if off+2 > len(p) {
				return -1
			}
			return off + 2
		case l > 63:
			return -1
		default:
			off += 1 + l
		}
	}
	return -1
}
