package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/miekg/dns"
)

// Helpers of the end-to-end tests: the real kuma-cp and kuma-dp binaries, run as a user
// would, on loopback, with kernel-chosen ports read back from their ready files.

// bins holds the kuma-cp and kuma-dp binaries, built once per test run.
var bins testutil.GoBinaries

// binaries builds kuma-cp and kuma-dp once per test run.
func binaries(t testing.TB) (cp, dp string) {
	t.Helper()
	return bins.Build(t, "kuma-cp", "."), bins.Build(t, "kuma-dp", "../kuma-dp")
}

func TestMain(m *testing.M) { bins.RunTests(m) }

// proc is a running binary with its logs (testutil.Process).
type proc struct {
	*testutil.Process
	t testing.TB
	// metrics is the diagnostics endpoint, once read from the ready file (replicas).
	metrics string
}

func startProc(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	return &proc{Process: testutil.Start(t, name, bin, args...), t: t}
}

// readyJSON waits for the process's ready file and decodes it into v.
func (p *proc) readyJSON(path string, v any) {
	p.t.Helper()
	p.ReadyJSON(p.t, path, v, 15*time.Second)
}

// cpEnv is a control plane's files: certificates, token key and resources directory.
type cpEnv struct {
	t         testing.TB
	dir       string // certs and tokens
	resources string
	address   string   // once started
	metrics   string   // the diagnostics endpoint, once started
	api       string   // the API, once started with --admin-token-file
	wrap      []string // a command kuma-cp is started under (prlimit ...), if any
}

func newCPEnv(t testing.TB) *cpEnv {
	t.Helper()
	e := &cpEnv{t: t, dir: t.TempDir(), resources: filepath.Join(t.TempDir(), "resources")}
	if err := certs.Write(e.dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.resources, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *cpEnv) path(name string) string { return filepath.Join(e.dir, name) }

// write puts a resource file in the resources directory (through a rename).
func (e *cpEnv) write(name, body string) {
	e.t.Helper()
	if err := writeFileAtomic(filepath.Join(e.resources, name), body); err != nil {
		e.t.Fatal(err)
	}
}

// token issues a token with the control plane's key and writes it to a file.
func (e *cpEnv) token(name, meshName string) string {
	e.t.Helper()
	return e.tokenExpiring(name, meshName, time.Now().Add(time.Hour))
}

// tokenExpiring is token with an expiry.
func (e *cpEnv) tokenExpiring(name, meshName string, expires time.Time) string {
	e.t.Helper()
	key, err := token.ReadKey(e.path(certs.TokenKeyFile))
	if err != nil {
		e.t.Fatal(err)
	}
	f := e.path(meshName + "." + name + "." + fmt.Sprint(expires.Unix()) + ".token")
	if err := os.WriteFile(f, []byte(token.Issue(key, token.Identity{Name: name, Mesh: meshName, Expires: expires.Unix()})+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// start runs kuma-cp on the environment (on e.address when set: a restart), extra flags added.
func (e *cpEnv) start(extra ...string) *proc {
	e.t.Helper()
	cpBin, _ := binaries(e.t)
	addr := e.address
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ready := filepath.Join(e.t.TempDir(), "cp-ready.json")
	args := append([]string{"serve", "--resources-dir", e.resources, "--address", addr,
		"--tls-cert-file", e.path(certs.TLSCertFile), "--tls-key-file", e.path(certs.TLSKeyFile),
		"--token-key-file", e.path(certs.TokenKeyFile), "--poll-interval", "50ms", "--ready-file", ready, "--log-level", "debug", "--metrics-address", "127.0.0.1:0"}, extra...)
	bin := cpBin
	if len(e.wrap) > 0 {
		bin, args = e.wrap[0], append(append(e.wrap[1:len(e.wrap):len(e.wrap)], cpBin), args...)
	}
	p := startProc(e.t, "kuma-cp", bin, args...)
	var r struct{ Address, Metrics, API string }
	p.readyJSON(ready, &r)
	e.address, e.metrics, e.api = r.Address, r.Metrics, r.API
	return p
}

// agent is a running `kuma-dp run` fed by a control plane.
type agent struct {
	*proc
	dns   string
	ready string
}

// startAgent runs kuma-dp against the control plane at cpAddr; with wait, it returns once
// the agent is ready (its first complete sync done).
func startAgent(t *testing.T, e *cpEnv, cpAddr string, wait bool, extra ...string) *agent {
	t.Helper()
	_, dpBin := binaries(t)
	work := t.TempDir()
	a := &agent{ready: filepath.Join(work, "ready.json")}
	args := append([]string{"run", "--cp-address", "grpcs://" + cpAddr, "--ca-cert-file", e.path(certs.CACertFile),
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", testutil.NXDomainUpstream(t), "--envoy=false", "--work-dir", work, "--ready-file", a.ready,
		"--drain-time", "0s", "--cp-retry-backoff", "100ms", "--log-level", "debug"}, extra...)
	a.proc = startProc(t, "kuma-dp", dpBin, args...)
	if wait {
		a.waitReady()
	}
	return a
}

func (a *agent) waitReady() {
	a.t.Helper()
	var r struct{ DNSUDP []string }
	a.readyJSON(a.ready, &r)
	a.dns = r.DNSUDP[0]
}

// query asks the agent's resolver for name's A records.
func (a *agent) query(name string) []string {
	a.t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, a.dns)
	if err != nil {
		a.t.Fatalf("query %s: %v", name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if v, ok := rr.(*dns.A); ok {
			out = append(out, v.A.String())
		}
	}
	return out
}

func (a *agent) answers(name string) bool { return len(a.query(name)) > 0 }

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	return testutil.WaitFor(t, what, within, cond)
}

// stallProxy forwards TCP to a target; stall freezes every connection open at the time
// (kept open, nothing forwarded either way), as a hung peer or a black-holed path would,
// while new connections are forwarded normally.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*proxyConn
	closed chan struct{}
	cut    bool // new connections are stalled at once too (a partition), until heal
}

type proxyConn struct {
	a, b    net.Conn
	stalled chan struct{}
	once    sync.Once
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, closed: make(chan struct{})}
	go p.accept()
	t.Cleanup(func() {
		close(p.closed)
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.a.Close()
			c.b.Close()
		}
	})
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		c := &proxyConn{a: a, b: b, stalled: make(chan struct{})}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		if p.cut {
			c.once.Do(func() { close(c.stalled) })
		}
		p.mu.Unlock()
		go c.pipe(a, b, p.closed)
		go c.pipe(b, a, p.closed)
	}
}

// pipe copies until the connection stalls; then it stops reading (the peer's writes pile up
// in the socket buffers, unanswered).
func (c *proxyConn) pipe(dst, src net.Conn, closed <-chan struct{}) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		select {
		case <-c.stalled:
			<-closed // hold the connection open, forwarding nothing, until the test ends
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// stall freezes every connection open now; it returns how many.
func (p *stallProxy) stall() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.once.Do(func() { close(c.stalled) })
	}
	return len(p.conns)
}

// partition stalls every connection open now and every new one, until heal: nothing
// passes either way, and nothing is closed.
func (p *stallProxy) partition() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.stall()
}

// heal forwards new connections again (those stalled stay stalled).
func (p *stallProxy) heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// writeFileAtomic writes through a rename, as editors and ConfigMaps do: no reader sees half
// a file.
func writeFileAtomic(path, body string) error {
	if err := os.WriteFile(path+".tmp~", []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp~", path)
}
