package dnsserver

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// A seed packet and what the server must do with it: answer with rcode (the extended
// rcode for BADVERS), or stay silent (-1), or either (-2: only "no crash, still serving").
type seed struct {
	name  string
	pkt   []byte
	rcode int
}

func hdr(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 0, 64)
	for _, v := range []uint16{id, flags, qd, an, ns, ar} {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func wireQ(name string, qtype uint16) []byte {
	b := appendName(nil, strings.TrimSuffix(name, "."))
	return append(b, byte(qtype>>8), byte(qtype), 0, 1)
}

func optRR(size uint16, version byte, rdata []byte) []byte {
	b := []byte{0, 0, 41, byte(size >> 8), byte(size), 0, version, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(rdata)))
	return append(b, rdata...)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func seeds() []seed {
	label64 := append([]byte{64}, []byte(strings.Repeat("a", 64))...)
	long := []byte{}
	for range 5 {
		long = append(long, 63)
		long = append(long, []byte(strings.Repeat("b", 63))...)
	}
	return []seed{
		{"ok A", cat(hdr(1, 0x0100, 1, 0, 0, 0), wireQ("backend.mesh", 1)), dns.RcodeSuccess},
		{"ok A with EDNS", cat(hdr(2, 0x0100, 1, 0, 0, 1), wireQ("backend.mesh", 1), optRR(1232, 0, nil)), dns.RcodeSuccess},
		{"zero questions", hdr(3, 0x0100, 0, 0, 0, 0), dns.RcodeFormatError},
		{"two questions", cat(hdr(4, 0x0100, 2, 0, 0, 0), wireQ("backend.mesh", 1), wireQ("web.mesh", 1)), dns.RcodeFormatError},
		{"compression loop", cat(hdr(5, 0x0100, 1, 0, 0, 0), []byte{0xC0, 12, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"compression loop of two", cat(hdr(6, 0x0100, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 12, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"64-byte label", cat(hdr(7, 0x0100, 1, 0, 0, 0), label64, []byte{0, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"name over 255 bytes", cat(hdr(8, 0x0100, 1, 0, 0, 0), long, []byte{0, 0, 1, 0, 1}), dns.RcodeFormatError},
		{"unknown opcode 3", cat(hdr(9, 3<<11|0x0100, 1, 0, 0, 0), wireQ("backend.mesh", 1)), dns.RcodeNotImplemented},
		{"opcode UPDATE", cat(hdr(10, 5<<11, 1, 0, 0, 0), wireQ("mesh", 6)), dns.RcodeNotImplemented},
		{"EDNS version 1", cat(hdr(11, 0x0100, 1, 0, 0, 1), wireQ("backend.mesh", 1), optRR(1232, 1, nil)), dns.RcodeBadVers},
		{"EDNS version 255 on a forwarded name", cat(hdr(12, 0x0100, 1, 0, 0, 1), wireQ("example.org", 1), optRR(512, 255, nil)), dns.RcodeBadVers},
		{"OPT option overruns its RDATA", cat(hdr(13, 0x0100, 1, 0, 0, 1), wireQ("backend.mesh", 1), optRR(1232, 0, []byte{0, 10, 0, 9, 1})), dns.RcodeFormatError},
		{"question cut short", cat(hdr(14, 0x0100, 1, 0, 0, 0), []byte{7, 'b', 'a', 'c'}), dns.RcodeFormatError},
		// miekg/dns reads a missing type and class as zero: forwarded, any answer will do
		{"no type and class", cat(hdr(15, 0x0100, 1, 0, 0, 0), appendName(nil, "backend.mesh")), -2},
		{"short header", []byte{0, 16, 1, 0, 0}, -1},
		{"a response (QR set)", cat(hdr(17, 0x8100, 1, 0, 0, 0), wireQ("backend.mesh", 1)), -1},
		{"two OPT records", cat(hdr(18, 0x0100, 1, 0, 0, 2), wireQ("backend.mesh", 1), optRR(1232, 0, nil), optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"two OPT records on a forwarded name", cat(hdr(22, 0x0100, 1, 0, 0, 2), wireQ("example.org", 1), optRR(1232, 0, nil), optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"NOTIFY for a VIP name", cat(hdr(23, 4<<11|0x0400, 1, 0, 0, 0), wireQ("backend.mesh", 6)), dns.RcodeNotImplemented},
		{"AXFR of a VIP name", cat(hdr(24, 0x0000, 1, 0, 0, 0), wireQ("backend.mesh", 252)), dns.RcodeRefused},
		{"IXFR of a VIP name", cat(hdr(25, 0x0000, 1, 0, 0, 0), wireQ("backend.mesh", 251)), dns.RcodeRefused},
		{"trailing garbage", cat(hdr(19, 0x0100, 1, 0, 0, 0), wireQ("backend.mesh", 1), []byte{1, 2, 3}), -2},
		{"answer record in a query", cat(hdr(20, 0x0100, 1, 1, 0, 0), wireQ("backend.mesh", 1), []byte{0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4}), -2},
		{"class CHAOS", cat(hdr(21, 0x0100, 1, 0, 0, 0), appendName(nil, "backend.mesh"), []byte{0, 1, 0, 3}), -2},
		{"empty", nil, -1},
		// answered by reject, badVers or the handler with an OPT, by the responder
		{"EDNS version 1 with DO", cat(hdr(26, 0x0100, 1, 0, 0, 1), wireQ("backend.mesh", 1), []byte{0, 0, 41, 4, 208, 0, 1, 0x80, 0, 0, 0}), dns.RcodeBadVers},
		{"STATUS with an OPT", cat(hdr(27, 2<<11, 1, 0, 0, 1), wireQ("example.org", 1), optRR(1232, 0, nil)), dns.RcodeNotImplemented},
		{"zero questions with an OPT", cat(hdr(28, 0x0100, 0, 0, 0, 1), optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"OPT after a bad answer record", cat(hdr(29, 0x0100, 1, 1, 0, 1), wireQ("backend.mesh", 1),
			[]byte{0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 3, 1, 2, 3}, optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"class ANY", cat(hdr(30, 0x0100, 1, 0, 0, 0), appendName(nil, "backend.mesh"), []byte{0, 1, 0, 255}), dns.RcodeSuccess},
		{"SOA of a VIP name", cat(hdr(31, 0x0100, 1, 0, 0, 0), wireQ("backend.mesh", 6)), dns.RcodeSuccess},
		{"padded past 512 bytes", cat(hdr(32, 0x0100, 1, 0, 0, 1), wireQ("example.org", 1), optRR(1232, 0,
			append([]byte{0, 12, 2, 0}, make([]byte, 512)...))), dns.RcodeSuccess},
	}
}

// TestMalformed sends odd packets over UDP and TCP: each gets the RFC's answer (FORMERR,
// NOTIMP, BADVERS) or none, and the server keeps answering. With -update it also writes
// the packets as FuzzServe's seed corpus under testdata/fuzz/FuzzServe.
func TestMalformed(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	if testutil.Updating() {
		dir := filepath.Join("testdata", "fuzz", "FuzzServe")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds() {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.pkt)
			name := fmt.Sprintf("seed-%02d-%s", i, strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
					return r
				}
				return '-'
			}, s.name))
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, s := range seeds() {
			t.Run(network+"/"+s.name, func(t *testing.T) {
				reply, err := sendRaw(network, ts.udp, s.pkt, 300*time.Millisecond)
				switch {
				case s.rcode == -1 && reply != nil:
					t.Fatalf("want no reply, got %v", reply)
				case s.rcode >= 0 && err != nil:
					t.Fatalf("want rcode %s, got %v", dns.RcodeToString[s.rcode], err)
				case s.rcode >= 0 && reply.Rcode != s.rcode:
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[reply.Rcode], dns.RcodeToString[s.rcode])
				}
				if reply != nil && len(s.pkt) >= 2 && reply.Id != binary.BigEndian.Uint16(s.pkt) {
					t.Fatalf("reply id %d", reply.Id)
				}
			})
		}
	}
	if r := ts.exchange(t, "udp", question("backend.mesh.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("server stopped answering: %v", r)
	}
}

// Questions about a VIP name that are not standard queries (NOTIFY, UPDATE) or ask for a
// zone transfer are answered here, never sent to the upstream resolver.
func TestVIPNamesNeverLeaveForOtherOpcodes(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	notify := new(dns.Msg)
	notify.SetNotify("backend.mesh.")
	update := new(dns.Msg)
	update.SetUpdate("backend.mesh.")
	axfr := new(dns.Msg)
	axfr.SetAxfr("web.mesh.")
	for _, tc := range []struct {
		name  string
		m     *dns.Msg
		rcode int
	}{{"NOTIFY", notify, dns.RcodeNotImplemented}, {"UPDATE", update, dns.RcodeNotImplemented}, {"AXFR", axfr, dns.RcodeRefused}} {
		for _, network := range []string{"udp", "tcp"} {
			before := up.queries.Load()
			r := ts.exchange(t, network, tc.m)
			if r.Rcode != tc.rcode {
				t.Errorf("%s over %s: %s, want %s", tc.name, network, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			if up.queries.Load() != before {
				t.Errorf("%s over %s for a VIP name went upstream", tc.name, network)
			}
		}
	}
	// a forwarded name's NOTIFY still goes where it did
	before := up.queries.Load()
	n := new(dns.Msg)
	n.SetNotify("example.org.")
	ts.exchange(t, "udp", n)
	if up.queries.Load() == before {
		t.Error("NOTIFY for a name not ours was not forwarded")
	}
}

// sendRaw sends one raw packet and returns the parsed reply; a nil reply with an error
// means no (complete) reply within timeout. An unparsable reply is an error too.
func sendRaw(network, addr string, pkt []byte, timeout time.Duration) (*dns.Msg, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	var n int
	if network == "tcp" {
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(pkt)))); err != nil {
			return nil, err
		}
		if len(pkt) > 0 {
			if _, err := c.Write(pkt); err != nil {
				return nil, err
			}
		}
		var l [2]byte
		if _, err := readFull(c, l[:]); err != nil {
			return nil, err
		}
		n = int(binary.BigEndian.Uint16(l[:]))
		if _, err := readFull(c, buf[:n]); err != nil {
			return nil, err
		}
	} else {
		if _, err := c.Write(pkt); err != nil {
			return nil, err
		}
		if n, err = c.Read(buf); err != nil {
			return nil, err
		}
	}
	m := new(dns.Msg)
	if err := m.Unpack(buf[:n]); err != nil {
		return m, fmt.Errorf("unparsable reply %x: %v", buf[:n], err)
	}
	return m, nil
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestErrorsKeepOPT: "If an OPT record is present in a received request, compliant
// responders MUST include an OPT record in their respective responses" (RFC 6891 6.1.1),
// FORMERR about the OPT itself included (section 7: it tells a format error from a server
// without EDNS, which a client would stop sending EDNS to). Each error answer to a query
// with an OPT (DO set) has one, version 0, with DO, and the query's id and opcode; opcodes
// other than QUERY and NOTIFY are not forwarded.
func TestErrorsKeepOPT(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	opt := []byte{0, 0, 41, 4, 208, 0, 0, 0x80, 0, 0, 0} // 1232 bytes, DO
	type tc struct {
		name   string
		pkt    []byte
		rcode  int
		opcode int
		tcp    bool
	}
	var cases []tc
	for _, op := range []int{dns.OpcodeIQuery, dns.OpcodeStatus, 3, dns.OpcodeUpdate, 6, 15} {
		for _, name := range []string{"backend.mesh", "example.org"} {
			cases = append(cases, tc{fmt.Sprintf("opcode %d %s", op, name),
				cat(hdr(uint16(op), uint16(op)<<11|0x0100, 1, 0, 0, 1), wireQ(name, 1), opt), dns.RcodeNotImplemented, op, true})
		}
	}
	cases = append(cases,
		tc{"zero questions", cat(hdr(100, 0x0100, 0, 0, 0, 1), opt), dns.RcodeFormatError, 0, true},
		tc{"two questions", cat(hdr(101, 0x0100, 2, 0, 0, 1), wireQ("backend.mesh", 1), wireQ("example.org", 1), opt), dns.RcodeFormatError, 0, true},
		tc{"OPT option overruns its RDATA", cat(hdr(102, 0x0100, 1, 0, 0, 1), wireQ("example.org", 1),
			[]byte{0, 0, 41, 4, 208, 0, 0, 0x80, 0, 0, 5, 0, 10, 0, 9, 1}), dns.RcodeFormatError, 0, true},
		tc{"OPT option cut short", cat(hdr(103, 0x0100, 1, 0, 0, 1), wireQ("backend.mesh", 1),
			[]byte{0, 0, 41, 4, 208, 0, 0, 0x80, 0, 0, 2, 0, 10}), dns.RcodeFormatError, 0, true},
		tc{"UPDATE with two zones", cat(hdr(105, 5<<11, 2, 0, 0, 1), wireQ("mesh", 6), wireQ("org", 6), opt), dns.RcodeNotImplemented, 5, true},
		// DSO (RFC 8490) has no question: "a responder that does not implement DSO" answers NOTIMP
		tc{"DSO", cat(hdr(106, 6<<11, 0, 0, 0, 1), opt), dns.RcodeNotImplemented, 6, true},
		tc{"OPT after a bad answer record", cat(hdr(104, 0x0100, 1, 1, 0, 1), wireQ("example.org", 1),
			[]byte{0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 3, 1, 2, 3}, opt), dns.RcodeFormatError, 0, true},
	)
	for _, c := range cases {
		for _, network := range []string{"udp", "tcp"} {
			if network == "tcp" && !c.tcp {
				continue
			}
			before := up.queries.Load()
			r, err := sendRaw(network, ts.udp, c.pkt, time.Second)
			if err != nil {
				t.Errorf("%s %s: %v", network, c.name, err)
				continue
			}
			o := r.IsEdns0()
			rd := c.pkt[2]&1 != 0 // RD is copied into the response (RFC 1035 4.1.1), whatever the opcode
			if r.Rcode != c.rcode || r.Opcode != c.opcode || r.Id != binary.BigEndian.Uint16(c.pkt) || r.RecursionDesired != rd ||
				o == nil || o.Version() != 0 || !o.Do() || o.Hdr.Ttl&0xff007fff != 0 {
				t.Errorf("%s %s: want %s, opcode %d, the id, RD %v, an OPT (version 0, DO); got %v", network, c.name,
					dns.RcodeToString[c.rcode], c.opcode, rd, r)
			}
			if up.queries.Load() != before {
				t.Errorf("%s %s went upstream", network, c.name)
			}
		}
	}
	// without an OPT, the same NOTIMP without one
	for _, network := range []string{"udp", "tcp"} {
		r, err := sendRaw(network, ts.udp, cat(hdr(107, 6<<11|0x0100, 0, 0, 0, 0), []byte{0, 1, 0, 2, 0, 0}), time.Second)
		if err != nil || r.Rcode != dns.RcodeNotImplemented || r.Opcode != 6 || !r.RecursionDesired || r.IsEdns0() != nil {
			t.Errorf("%s DSO without an OPT: want NOTIMP, opcode 6, RD, no OPT; got %v, %v", network, r, err)
		}
	}
	// Over TCP the FORMERR is about the query it answers, pipelined ones around it included,
	// and messages answered with nothing (a response, a short one) before it.
	conn, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var stream []byte
	for _, p := range [][]byte{
		cat(hdr(200, 0x0100, 1, 0, 0, 0), wireQ("backend.mesh", 1)),
		cat(hdr(300, 0x8100, 1, 0, 0, 0), wireQ("backend.mesh", 1)), // a response: ignored
		{1, 2, 3}, // shorter than a header: ignored
		cases[len(cases)-1].pkt,
		cat(hdr(201, 0x0100, 1, 0, 0, 1), wireQ("example.org", 1), opt),
		cat(hdr(202, 0x0100, 2, 0, 0, 0), wireQ("backend.mesh", 1), wireQ("example.org", 1)),
	} {
		stream = append(binary.BigEndian.AppendUint16(stream, uint16(len(p))), p...)
	}
	if _, err := conn.Write(stream); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	for i, want := range []struct {
		id          uint16
		rcode       int
		opt, answer bool
	}{{200, dns.RcodeSuccess, false, true}, {104, dns.RcodeFormatError, true, false},
		{201, dns.RcodeSuccess, true, true}, {202, dns.RcodeFormatError, false, false}} {
		var l [2]byte
		if _, err := readFull(conn, l[:]); err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := readFull(conn, b); err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(b); err != nil || r.Id != want.id || r.Rcode != want.rcode ||
			(r.IsEdns0() != nil) != want.opt || (len(r.Answer) > 0) != want.answer {
			t.Errorf("pipelined answer %d: want id %d %s, OPT %v, answer %v; got %v (%v)", i, want.id,
				dns.RcodeToString[want.rcode], want.opt, want.answer, r, err)
		}
	}
}
