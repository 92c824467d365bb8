package dnsserver

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

func TestDeadUpstreamServfail(t *testing.T) {
	// A port nothing listens on: the kernel refuses at once.
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := c.LocalAddr().String()
	c.Close()
	ts := startServer(t, Config{Upstreams: []string{dead}}, testTable())
	for _, network := range []string{"udp", "tcp"} {
		start := time.Now()
		r := ts.exchange(t, network, question("example.org.", dns.TypeA))
		if r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("%s: rcode %s, want SERVFAIL", network, dns.RcodeToString[r.Rcode])
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: SERVFAIL took %s", network, d)
		}
	}
	// VIP answers do not need the upstream.
	if r := ts.exchange(t, "udp", question("backend.mesh.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("VIP answer with a dead upstream: %v", r)
	}
	if v := metricValue(t, ts.Server, "kuma_dp_dns_upstream_failures_total"); v < 2 {
		t.Errorf("upstream failures %v, want >= 2", v)
	}
}

// TestSilentUpstreamServfail: an upstream that swallows queries (UDP read, TCP accepted,
// never answered) still gets the client a SERVFAIL, before a stub resolver's usual 5 s
// timeout (forward: 2 attempts x 2 s read timeout); then at once (cached SERVFAIL, and
// the upstream is marked down).
func TestSilentUpstreamServfail(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: takes 4 s")
	}
	c, l, err := bindPair(netip.MustParseAddrPort("127.0.0.1:0")) // UDP and TCP, one port
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer l.Close()
	ts := startServer(t, Config{Upstreams: []string{c.LocalAddr().String()}}, testTable())
	for i, limit := range []time.Duration{4900 * time.Millisecond, time.Second} {
		start := time.Now()
		r := ts.exchange(t, "udp", question("example.org.", dns.TypeA))
		if r.Rcode != dns.RcodeServerFailure || time.Since(start) > limit {
			t.Fatalf("query %d: rcode %s after %s, want SERVFAIL within %s",
				i, dns.RcodeToString[r.Rcode], time.Since(start), limit)
		}
	}
}

func metricsText(t *testing.T, s *Server) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func metricValue(t *testing.T, s *Server, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(metricsText(t, s))
	if m == nil {
		t.Fatalf("series %s not found", series)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestMetrics(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	ts.Swap(testTable()) // a second swap
	for _, q := range []struct {
		net   string
		name  string
		qtype uint16
	}{
		{"udp", "backend.mesh.", dns.TypeA}, {"tcp", "backend.mesh.", dns.TypeA},
		{"udp", "backend.mesh.", dns.TypeAAAA}, {"udp", "1.0.0.240.in-addr.arpa.", dns.TypePTR},
		{"udp", "backend.mesh.", dns.TypeMX}, {"udp", "example.org.", dns.TypeA},
		{"udp", "example.org.", dns.TypeA}, // second one from the cache
	} {
		ts.exchange(t, q.net, question(q.name, q.qtype))
	}
	for series, want := range map[string]float64{
		"kuma_dp_dns_table_entries":                                                             5,
		"kuma_dp_dns_table_swaps_total":                                                         2,
		`kuma_dp_dns_answers_total{source="local",type="A"}`:                                    2,
		`kuma_dp_dns_answers_total{source="local",type="AAAA"}`:                                 1,
		`kuma_dp_dns_answers_total{source="local",type="PTR"}`:                                  1,
		`kuma_dp_dns_answers_total{source="local",type="MX"}`:                                   1,
		`kuma_dp_dns_answers_total{source="upstream",type="A"}`:                                 2,
		`kuma_dp_dns_upstream_failures_total`:                                                   0,
		`coredns_cache_hits_total{server="dns://127.0.0.1:0",type="success",view="",zones="."}`: 1,
	} {
		if got := metricValue(t, ts.Server, series); got != want && !strings.HasPrefix(series, "coredns_") {
			t.Errorf("%s = %v, want %v", series, got, want)
		} else if strings.HasPrefix(series, "coredns_") && got < want {
			t.Errorf("%s = %v, want >= %v", series, got, want)
		}
	}
	if up.queries.Load() != 1 {
		t.Errorf("upstream got %d queries, want 1 (second one cached)", up.queries.Load())
	}
	if text := metricsText(t, ts.Server); strings.Contains(text, "go_goroutines") {
		t.Errorf("Go runtime metrics exported (the agent's endpoint owns them)")
	}
}

func TestConfigErrors(t *testing.T) {
	rc := writeResolvConf(t, "nameserver 10.0.0.1\nsearch a.local\n")
	empty := writeResolvConf(t, "search only.local\n")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error: the field and the value
	}{
		{"no port", Config{Addrs: []string{"127.0.0.1"}, ResolvConf: rc}, `addrs[0] "127.0.0.1"`},
		{"port out of range", Config{Addrs: []string{"127.0.0.1:70000"}, ResolvConf: rc}, `addrs[0] "127.0.0.1:70000": port "70000"`},
		{"hostname", Config{Addrs: []string{"127.0.0.1:53", "localhost:53"}, ResolvConf: rc}, `addrs[1] "localhost:53": host "localhost" is not an IP address`},
		{"twice", Config{Addrs: []string{"127.0.0.1:53", "127.0.0.1:53"}, ResolvConf: rc}, `addrs[1] "127.0.0.1:53": listed twice`},
		{"bad upstream", Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"dns.google"}, ResolvConf: rc}, `upstreams[0] "dns.google"`},
		{"upstream port 0", Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"10.0.0.1:0"}, ResolvConf: rc}, `upstreams[0] "10.0.0.1:0"`},
		{"ttl", Config{Addrs: []string{"127.0.0.1:0"}, TTL: 1 << 31, ResolvConf: rc}, `ttl 2147483648`},
		{"no resolv.conf, no upstreams", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: "/nonexistent/resolv.conf"}, `resolv_conf "/nonexistent/resolv.conf"`},
		{"resolv.conf without nameserver", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: empty}, `upstreams: none usable`},
		{"bad resolv.conf nameserver", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: writeResolvConf(t, "nameserver fe80::1%eth0\n")}, `nameserver[0] "fe80::1%eth0"`},
		{"template syntax", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: rc, CorefileTemplate: ".:53 { kumavip {{.ID }"}, `corefile_template: template`},
		{"template unknown field", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: rc, CorefileTemplate: ".:53 {\n kumavip {{.Nope}}\n}"}, `corefile_template`},
		{"template without kumavip", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: rc, CorefileTemplate: ".:53 {\n forward . 10.0.0.1\n}"}, `server block ".:53" has no "kumavip kdp`},
		{"template, one block without kumavip", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: rc,
			CorefileTemplate: ".:0 {\n kumavip {{.ID}}\n}\nexample.org:0 {\n forward . 10.0.0.1\n}"}, `server block "example.org:0" has no`},
		{"template with TLS", Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: rc, CorefileTemplate: "tls://.:853 {\n kumavip {{.ID}}\n}"}, `only plain DNS`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestResolvConf(t *testing.T) {
	p := writeResolvConf(t, "# comment\nnameserver 10.0.0.1\nnameserver fd00::53\nsearch old.local\noptions ndots:5\nsearch Default.Svc.Cluster.Local. svc.cluster.local\n")
	n, err := normalize(Config{Addrs: []string{"127.0.0.1:0"}, ResolvConf: p})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(n.upstreams, " "); got != "10.0.0.1:53 [fd00::53]:53" {
		t.Errorf("upstreams %q", got)
	}
	if got := strings.Join(n.search, " "); got != "default.svc.cluster.local svc.cluster.local" {
		t.Errorf("search %q (the last search line wins, lower-cased)", got)
	}
}

func TestCorefileGolden(t *testing.T) {
	p := writeResolvConf(t, "nameserver 10.0.0.1\nnameserver 10.0.0.2:5353\nsearch a.local\n")
	n, err := normalize(Config{Addrs: []string{"127.0.0.1:15053", "[::1]:15053", "10.1.2.3:53"}, ResolvConf: p})
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderCorefile("", corefileData("kdp-golden", n))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "Corefile.golden"), []byte(got))
}

func TestUserTemplate(t *testing.T) {
	up := startUpstream(t)
	tmpl := `{{range .Blocks}}.:{{.Port}} {
    bind{{range .Hosts}} {{.}}{{end}}
    errors
    kumavip {{$.ID}}
    forward .{{range $.Upstreams}} {{.}}{{end}}
}
{{end}}`
	ts := startServer(t, Config{Upstreams: []string{up.addr}, CorefileTemplate: tmpl, TTL: 5}, testTable())
	if !strings.Contains(ts.Corefile(), "errors") || strings.Contains(ts.Corefile(), "cache") {
		t.Fatalf("template not used:\n%s", ts.Corefile())
	}
	if r := ts.exchange(t, "udp", question("backend.mesh.", dns.TypeA)); len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 5 {
		t.Fatalf("VIP answer %v", r)
	}
	ts.exchange(t, "udp", question("example.org.", dns.TypeA))
	ts.exchange(t, "udp", question("example.org.", dns.TypeA))
	if up.queries.Load() != 2 {
		t.Errorf("upstream got %d queries, want 2 (no cache in this template)", up.queries.Load())
	}
}

func TestPortInUse(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.LocalAddr().String()
	s, err := New(Config{Addrs: []string{addr}, Upstreams: []string{"10.0.0.1"}, ResolvConf: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run: %v, want an error naming %s", err, addr)
	}
	select {
	case <-s.Ready():
		t.Fatal("Ready closed after a failed Run")
	default:
	}
}

func TestTwoAddresses(t *testing.T) {
	if !hasIPv6Loopback() {
		t.Skip("no IPv6 loopback here")
	}
	up := startUpstream(t)
	ts := startServer(t, Config{Addrs: []string{"127.0.0.1:0", "[::1]:0"}, Upstreams: []string{up.addr}}, testTable())
	udp, tcp := ts.Addrs()
	if len(udp) != 2 || len(tcp) != 2 {
		t.Fatalf("addrs %v %v", udp, tcp)
	}
	for i := range udp {
		for _, c := range []struct{ net, addr string }{{"udp", udp[i].String()}, {"tcp", tcp[i].String()}} {
			cl := &dns.Client{Net: c.net, Timeout: 3 * time.Second}
			r, _, err := cl.Exchange(question("backend.mesh.", dns.TypeAAAA), c.addr)
			if err != nil || len(r.Answer) != 1 {
				t.Errorf("%s %s: %v %v", c.net, c.addr, err, r)
			}
		}
	}
}

// TestStartStop starts and stops at once, many times: Run always returns, and leaves no
// goroutine behind (TestMain checks), whether cancelled before or right after Ready
// (docs/dns.md, embedding pitfall 1: a stop racing the start could hang forever).
func TestStartStop(t *testing.T) {
	for i := range 20 {
		s, err := New(Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, ResolvConf: "/nonexistent"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		if i%2 == 1 {
			<-s.Ready()
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Run: %v", i, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: Run did not return", i)
		}
	}
}
