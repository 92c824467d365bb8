package dnsserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestGoResolver points Go's own resolver (what Go apps use) at the server.
func TestGoResolver(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				addr := ts.udp
				if network == "tcp" {
					addr = ts.tcp
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, tc := range []struct {
				host string
				want []string
			}{
				{"backend.mesh", []string{"240.0.0.1", "fd00:fd01::1"}},
				{"backend.mesh.", []string{"240.0.0.1", "fd00:fd01::1"}},
				{"BACKEND.mesh", []string{"240.0.0.1", "fd00:fd01::1"}},
				// one family only: the other query is NODATA, so the lookup succeeds
				{"web.mesh", []string{"240.0.0.2"}},
				{"v6only.mesh", []string{"fd00:fd01::3"}},
				{"backend.mesh.default.svc.cluster.local", []string{"240.0.0.1", "fd00:fd01::1"}},
				{"example.org", []string{"93.184.216.34"}},
			} {
				got, err := r.LookupHost(ctx, tc.host)
				slices.Sort(got)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("LookupHost(%q) = %v, %v; want %v", tc.host, got, err, tc.want)
				}
			}
			for ip, want := range map[string]string{"240.0.0.1": "backend.mesh.", "fd00:fd01::3": "v6only.mesh."} {
				got, err := r.LookupAddr(ctx, ip)
				if err != nil || len(got) != 1 || got[0] != want {
					t.Errorf("LookupAddr(%s) = %v, %v; want %s", ip, got, err, want)
				}
			}
			cname, err := r.LookupCNAME(ctx, "web.mesh.svc.cluster.local")
			if err != nil || cname != "web.mesh." {
				t.Errorf("LookupCNAME = %q, %v", cname, err)
			}
			if _, err := r.LookupHost(ctx, "nope.example.org"); err == nil {
				t.Errorf("nope.example.org resolved")
			}
		})
	}
}

// TestDig queries with dig, the tool people debug DNS with (CI installs dnsutils).
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed (Debian package dnsutils): skipping the dig tests")
	}
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	// Run binds TCP on UDP's port, so dig's retry over TCP reaches the same server.
	host, port, _ := net.SplitHostPort(ts.udp)
	if ts.tcp != ts.udp {
		t.Fatalf("UDP %s and TCP %s ports differ", ts.udp, ts.tcp)
	}
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		args = append([]string{"@" + host, "-p", port, "+tries=1", "+time=3"}, args...)
		out, err := exec.Command(dig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cases := []struct {
		name string
		args []string
		want []string // substrings of dig's output
		not  []string
	}{
		{"udp A", []string{"backend.mesh", "A"},
			[]string{"status: NOERROR", "flags: qr aa rd ra", "backend.mesh.\t\t30\tIN\tA\t240.0.0.1"}, nil},
		{"tcp AAAA", []string{"+tcp", "backend.mesh", "AAAA"},
			[]string{"status: NOERROR", "backend.mesh.\t\t30\tIN\tAAAA\tfd00:fd01::1"}, nil},
		{"norec", []string{"+norec", "backend.mesh", "A"},
			[]string{"flags: qr aa ra;", "240.0.0.1"}, nil},
		{"NODATA", []string{"web.mesh", "AAAA"},
			[]string{"status: NOERROR", "ANSWER: 0", "AUTHORITY: 1", "IN\tSOA\tweb.mesh."}, []string{"NXDOMAIN"}},
		{"PTR", []string{"-x", "240.0.0.2"}, []string{"PTR\tweb.mesh."}, nil},
		{"search domain", []string{"web.mesh.default.svc.cluster.local", "A"},
			[]string{"CNAME\tweb.mesh.", "web.mesh.\t\t30\tIN\tA\t240.0.0.2"}, nil},
		{"bufsize: TC on a big forwarded answer", []string{"+bufsize=1232", "+ignore", "big.example.org", "TXT"},
			[]string{"flags: qr tc rd ra"}, nil},
		{"bufsize big enough for the long local answer", []string{"+bufsize=1232", longName + ".default.svc.cluster.local", "ANY"},
			[]string{"ANSWER: 3", "udp: 1232"}, []string{" tc "}},
		{"no EDNS: the long local answer without its CNAME, not truncated", []string{"+noedns", "+ignore", longName + ".default.svc.cluster.local", "AAAA"},
			[]string{"flags: qr aa rd ra", "ANSWER: 1", "IN AAAA fd00:fd01::5"}, []string{" tc ", "CNAME"}},
		{"dig retries TC over TCP", []string{"+noedns", "big.example.org", "TXT"},
			[]string{"ANSWER: 20"}, nil}, // 20 TXT do not fit 512 bytes: this answer came over TCP
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("unexpected %q in:\n%s", n, out)
				}
			}
		})
	}
}

// TestUpstreamWithoutRA: an upstream that does not set RA (an authoritative-only server, a
// stub written without it) does not make us look lame. We do offer recursion, so every
// answer we relay has RA: a NOERROR with no answer, no AA, no RA and no additional record
// is a referral to libresolv, which gives up on the server instead of taking the NODATA
// (glibc without edns0; Go's resolver does the same, golang.org/issue/15434, but sends an
// OPT, whose echo in the additional section spares it).
func TestUpstreamWithoutRA(t *testing.T) {
	ts := startServer(t, Config{Upstreams: []string{v4Upstream(t, func(*dns.Msg) {})}}, testTable()) // RA clear, AA clear
	for _, network := range []string{"udp", "tcp"} {
		for i := range 2 { // the upstream's answer, then the cache's
			for _, q := range []struct {
				name  string
				qtype uint16
			}{{"v4.example.org.", dns.TypeA}, {"v4.example.org.", dns.TypeAAAA}, {"nope.example.org.", dns.TypeA}} {
				if r := ts.exchange(t, network, question(q.name, q.qtype)); !r.RecursionAvailable {
					t.Errorf("%s %s %s (%d): RA clear: %v", network, q.name, dns.TypeToString[q.qtype], i, r)
				}
			}
		}
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, ts.udp)
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := r.LookupIP(ctx, "ip", "v4.example.org")
		if err != nil || len(got) != 1 || got[0].String() != "192.0.2.1" {
			t.Errorf("%s: Go's LookupIP = %v, %v; want 192.0.2.1", network, got, err)
		}
		// the NODATA: "no such host", not a lame server
		got, err = r.LookupIP(ctx, "ip6", "v4.example.org")
		cancel()
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: Go's LookupIP(ip6) = %v, %v; want not found", network, got, err)
		}
	}
}

// TestForwardedQuestionCase: a forwarded answer carries the question exactly as the client
// asked it (0x20: c-ares with ARES_FLAG_DNS0x20, unbound's use-caps-for-id reject any other
// case as a spoof), also from an upstream that answers in lower case - the cache's answers
// already did.
func TestForwardedQuestionCase(t *testing.T) {
	ts := startServer(t, Config{Upstreams: []string{v4Upstream(t, func(m *dns.Msg) {
		m.RecursionAvailable = true
		m.Question[0].Name = strings.ToLower(m.Question[0].Name)
	})}}, testTable())
	for i, name := range []string{"V4.ExAmple.ORG.", "v4.EXAMPLE.org.", "NoPe.Example.Org.", "nOpE.eXaMpLe.OrG."} {
		for _, network := range []string{"udp", "tcp"} {
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
				if r := ts.exchange(t, network, question(name, qtype)); r.Question[0].Name != name {
					t.Errorf("%d %s %s %s: question %q, want %q as asked", i, network, name, dns.TypeToString[qtype],
						r.Question[0].Name, name)
				}
			}
		}
	}
}

// v4Upstream starts an upstream resolver (UDP and TCP) that knows one name,
// v4.example.org (A 192.0.2.1, no AAAA), and answers NXDOMAIN for the rest; shape changes
// each reply before its records are added (its question is the one matched). It returns the
// upstream's address.
func v4Upstream(t *testing.T, shape func(*dns.Msg)) string {
	t.Helper()
	u, l, err := bindPair(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveUDPTCP(u, l, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		shape(m)
		switch q := m.Question[0]; {
		case !strings.EqualFold(q.Name, "v4.example.org."):
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, rr(t, "v4.example.org. 60 IN A 192.0.2.1"))
		}
		w.WriteMsg(m)
	})))
	return u.LocalAddr().String()
}
