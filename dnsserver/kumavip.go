package dnsserver

import (
	"context"
	"net"
	"strings"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
)

// handler is kumavip in the CoreDNS chain: it serves TCP and the UDP queries the fast path
// left to CoreDNS, and passes names it does not own to the next plugin.
type handler struct {
	s    *Server
	next plugin.Handler
}

func (h *handler) Name() string { return pluginName }

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (h *handler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(pluginName, h.next, ctx, w, r)
	}
	var (
		q  query
		nb [maxName]byte
	)
	if countOPT(r) > 1 {
		// RFC 6891 6.1.1: more than one OPT record is a format error.
		return h.refuse(w, r, dns.RcodeFormatError)
	}
	if opt := r.IsEdns0(); opt != nil {
		// The EDNS flags other than DO are "set to zero by senders and ignored by
		// receivers" (RFC 6891 6.1.4). CoreDNS builds the OPT of forwarded, cached and
		// SERVFAIL answers from the request's (request.SizeAndDo keeps bits 8-15): cleared
		// here, they are neither echoed to the client nor sent upstream as ours.
		opt.Hdr.Ttl &^= ednsZ
	}
	if r.Opcode != dns.OpcodeQuery && r.Opcode != dns.OpcodeNotify {
		// IQUERY, STATUS, UPDATE, unassigned: setup lets them through to be answered here,
		// never forwarded, with the query's OPT (CoreDNS adds it to what we write).
		return h.refuse(w, r, dns.RcodeNotImplemented)
	}
	qq := r.Question[0]
	n, err := dns.PackDomainName(qq.Name, nb[:], 0, nil, false)
	if err != nil {
		return h.upstream(ctx, w, r)
	}
	q.id, q.qname, q.qtype, q.qclass = r.Id, nb[:n], qq.Qtype, qq.Qclass
	if r.Opcode != dns.OpcodeQuery || qq.Qtype == dns.TypeAXFR || qq.Qtype == dns.TypeIXFR {
		if e, _, _, _ := h.s.resp.find(&q); e == nil {
			return h.upstream(ctx, w, r)
		}
		// A name of ours: no NOTIFY is forwarded upstream about it, and its names are not a
		// zone to transfer.
		if r.Opcode != dns.OpcodeQuery {
			return h.refuse(w, r, dns.RcodeNotImplemented)
		}
		return h.refuse(w, r, dns.RcodeRefused)
	}
	if r.RecursionDesired {
		q.flags |= flagRD
	}
	if r.CheckingDisabled {
		q.flags |= flagCD
	}
	if opt := r.IsEdns0(); opt != nil {
		q.edns, q.udpSize, q.do = true, opt.UDPSize(), opt.Do()
	}
	limit := q.limit()
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); tcp {
		limit = dns.MaxMsgSize
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	resp, kind := h.s.resp.answer(&q, (*bp)[:0], limit)
	*bp = resp[:0]
	if kind == notOurs {
		return h.upstream(ctx, w, r)
	}
	h.s.counted(kind, q.qtype)
	if _, err := w.Write(resp); err != nil {
		return dns.RcodeServerFailure, plugin.Error(pluginName, err)
	}
	return dns.RcodeSuccess, nil
}

// refuse answers r with rcode and nothing else; RD and CD are copied whatever the opcode
// (miekg/dns copies them for QUERY only; RFC 1035 4.1.1).
func (h *handler) refuse(w dns.ResponseWriter, r *dns.Msg, rcode int) (int, error) {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.RecursionDesired, m.CheckingDisabled = r.RecursionDesired, r.CheckingDisabled
	if rcode == dns.RcodeFormatError {
		m.SetRcodeFormatError(r)
	}
	if err := w.WriteMsg(m); err != nil {
		return dns.RcodeServerFailure, plugin.Error(pluginName, err)
	}
	return rcode, nil
}

func countOPT(m *dns.Msg) int {
	n := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// upstream hands the query to the rest of the chain (cache, forward) and counts the result.
// An answer is counted before it is written: a client that reads the metrics after its
// answer must see it counted.
func (h *handler) upstream(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	cw := &countingWriter{ResponseWriter: w, met: h.s.met}
	if len(r.Question) > 0 {
		cw.qname, cw.qtype = r.Question[0].Name, r.Question[0].Qtype
	}
	rc, err := plugin.NextOrFailure(pluginName, h.next, ctx, cw, r)
	noAnswer := !cw.wrote && !plugin.ClientWrite(rc)
	if noAnswer {
		// Nobody answered; the server writes the error (SERVFAIL) after we return.
		h.s.met.upFail.Inc()
	}
	if noAnswer || cw.rcode == dns.RcodeServerFailure {
		h.s.log.Debug("no upstream answer", "error", err)
	}
	if cw.wrote && cw.rcode == dns.RcodeServerFailure { // e.g. cache's stored SERVFAIL
		rc = dns.RcodeServerFailure
	}
	return rc, err
}

// countingWriter counts what the rest of the chain answers, as it is written: an upstream
// answer by query type, or an upstream failure (SERVFAIL).
type countingWriter struct {
	dns.ResponseWriter
	met   *metrics
	qname string // as the client wrote it
	qtype uint16
	wrote bool
	rcode int
}

func (c *countingWriter) count(rcode int) {
	if c.wrote {
		return // a second write of one answer (should not happen) is not a second answer
	}
	c.wrote, c.rcode = true, rcode
	if rcode == dns.RcodeServerFailure {
		c.met.upFail.Inc()
	} else {
		c.met.answer(srcUpstream, c.qtype)
	}
}

func (c *countingWriter) WriteMsg(m *dns.Msg) error {
	c.count(m.Rcode)
	// We offer recursion whatever the upstream's RA says: relayed without it, a NODATA
	// (no answer, no AA) is a referral to libresolv and Go, which then drop this server.
	m.RecursionAvailable = true
	if len(m.Question) == 1 && m.Question[0].Name != c.qname && strings.EqualFold(m.Question[0].Name, c.qname) {
		// the question as the client asked it (0x20), whatever case the upstream answered in
		m.Question[0].Name = c.qname
	}
	if opt := m.IsEdns0(); opt != nil {
		opt.Hdr.Ttl &^= ednsZ // an upstream's unknown EDNS flags are not ours to send (RFC 6891 6.1.4)
	}
	return c.ResponseWriter.WriteMsg(m)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	rcode := dns.RcodeSuccess
	if len(b) > 3 {
		rcode = int(b[3] & 0xF)
	}
	c.count(rcode)
	return c.ResponseWriter.Write(b)
}
