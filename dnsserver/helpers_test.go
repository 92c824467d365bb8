package dnsserver

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/kumadp/kuma-dp/vipalloc"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" { // TestRealClients runs this binary as a server or a client
		os.Exit(runRole(role, os.Args[1:]))
	}
	goleak.VerifyTestMain(m,
		// plugin/forward's pooled connections are freed by the GC, not by shutdown
		// (docs/dns.md, embedding pitfall 3).
		goleak.IgnoreTopFunction("github.com/coredns/coredns/plugin/pkg/proxy.(*Transport).connManager"),
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/plugin/pkg/up.(*Probe).Do.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
}

var searchDomains = []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}

func entry(host, v4, v6 string, key string) *vipalloc.Entry {
	return vipalloc.NewEntry(entryData(host, v4, v6, key))
}

func entryData(host, v4, v6 string, key string) vipalloc.EntryData {
	d := vipalloc.EntryData{Hostname: host, Key: key, Status: vipalloc.Available, Ports: []uint32{80}}
	if v4 != "" {
		d.IPv4 = netip.MustParseAddr(v4)
	}
	if v6 != "" {
		d.IPv6 = netip.MustParseAddr(v6)
	}
	return d
}

// testTable: both families, one family only, a hostname shared by two entries (same
// VIPs), a NotAvailable entry, and a name long enough to overflow 512 bytes through a
// search domain.
func testTable() *vipalloc.Table {
	d := entryData("down.mesh", "", "", "d")
	d.Reason, d.Status = "test", vipalloc.NotAvailable
	down := vipalloc.NewEntry(d)
	return vipalloc.NewTable([]*vipalloc.Entry{
		entry("backend.mesh", "240.0.0.1", "fd00:fd01::1", "a"),
		entry("web.mesh", "240.0.0.2", "", "b"),
		entry("v6only.mesh", "", "fd00:fd01::3", "c"),
		entry("shared.mesh", "240.0.0.4", "fd00:fd01::4", "s1"),
		entry("shared.mesh", "240.0.0.4", "fd00:fd01::4", "s2"),
		down,
		entry(longName, "240.0.0.5", "fd00:fd01::5", "l"),
	}, nil)
}

// longName is 219 bytes: with ".default.svc.cluster.local" the answer passes 512 bytes.
var longName = strings.Repeat(strings.Repeat("x", 62)+".", 3) + strings.Repeat("y", 26) + ".mesh"

// upstream is an in-process miekg/dns server standing in for the host's resolver.
type upstream struct {
	addr    string
	queries atomic.Int64
}

func startUpstream(t testing.TB) *upstream {
	t.Helper()
	u, l, err := bindPair(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	up := &upstream{addr: u.LocalAddr().String()}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		up.queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		q := r.Question[0]
		switch strings.ToLower(q.Name) {
		case "example.org.":
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, rr(t, "example.org. 60 IN A 93.184.216.34"))
			}
		case "big.example.org.": // ~2.3 kB of TXT: truncated over UDP, whole over TCP
			for i := range 20 {
				m.Answer = append(m.Answer, rr(t, "big.example.org. 60 IN TXT \""+strings.Repeat(string(rune('a'+i)), 100)+"\""))
			}
		default:
			m.Rcode = dns.RcodeNameError
		}
		writeTruncated(w, r, m)
	})
	t.Cleanup(serveUDPTCP(u, l, h))
	return up
}

// writeTruncated writes m, truncated over UDP to the client's size (512 bytes without EDNS0).
func writeTruncated(w dns.ResponseWriter, r, m *dns.Msg) {
	if _, isUDP := w.RemoteAddr().(*net.UDPAddr); isUDP {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

// serveUDPTCP serves h on u and l and returns once both serve; stop shuts both down (a
// second call does nothing).
func serveUDPTCP(u net.PacketConn, l net.Listener, h dns.Handler) (stop func()) {
	started := make(chan struct{}, 2)
	servers := []*dns.Server{
		{PacketConn: u, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }},
		{Listener: l, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }},
	}
	for _, s := range servers {
		go s.ActivateAndServe()
	}
	<-started
	<-started
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, s := range servers {
				s.Shutdown()
			}
		})
	}
}

func rr(t testing.TB, s string) dns.RR {
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func writeResolvConf(t testing.TB, content string) string {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testServer is a running resolver on 127.0.0.1 (UDP and TCP ports read back).
type testServer struct {
	*Server
	udp, tcp string
}

// startServer runs a resolver with tbl on 127.0.0.1:0, forwarding to up, with the test
// search domains; it stops it (and checks Run's result) at cleanup.
func startServer(t testing.TB, cfg Config, tbl *vipalloc.Table) *testServer {
	t.Helper()
	if cfg.Addrs == nil {
		cfg.Addrs = []string{"127.0.0.1:0"}
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = writeResolvConf(t, "nameserver 127.0.0.1\nsearch "+strings.Join(searchDomains, " ")+"\n")
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tbl != nil {
		s.Swap(tbl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("not ready after 10s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	udp, tcp := s.Addrs()
	return &testServer{Server: s, udp: udp[0].String(), tcp: tcp[0].String()}
}

// exchange sends m over network ("udp" or "tcp") and returns the reply.
func (ts *testServer) exchange(t testing.TB, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 65535}
	addr := ts.udp
	if network == "tcp" {
		addr = ts.tcp
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, m.Question[0].String(), err)
	}
	if r.Id != m.Id {
		t.Fatalf("reply id %d, query id %d", r.Id, m.Id)
	}
	return r
}

func question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}
