// Package nsdtest runs a real nsd for tests: serving zones from master files (a reference
// to compare answers with), or as a secondary transferring zones from primaries.
package nsdtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// Zone is one zone nsd serves: from File (a master file's text) when given, otherwise as a
// secondary of Primaries ("127.0.0.1@5353"), transferring with the TSIG key Key (of Config)
// and taking NOTIFY from them.
type Zone struct {
	Origin    string
	File      string
	Primaries []string
}

// Config of an nsd.
type Config struct {
	Zones []Zone
	// Key (name, base64 HMAC-SHA256 secret) signs transfers and NOTIFY; "" for none.
	KeyName, KeySecret string
	// Port to serve on (0: a free one). A port picked beforehand can race with another
	// process: give one only when the address is needed before nsd starts.
	Port int
	// Minimal: nsd's minimal-responses (no NS set in the authority section of positive
	// answers, no additional data but what a referral or an NS answer needs).
	Minimal bool
}

// Start runs nsd on a free loopback port until the test ends and returns its address
// (127.0.0.1:port, UDP and TCP). It skips the test when nsd is not installed or the test
// does not run as root (nsd opens its files as the user it runs as).
func Start(t testing.TB, cfg Config) string {
	t.Helper()
	bin, err := exec.LookPath("nsd")
	if err != nil {
		t.Skip("nsd not installed (Debian package nsd; make test installs it as root)")
	}
	if os.Geteuid() != 0 {
		t.Skip("nsd needs root here (it opens its files as the user it runs as): run as root")
	}
	port := cfg.Port
	if port == 0 {
		port = testutil.FreeDNSPort(t)
	}
	dir := t.TempDir()
	var conf strings.Builder
	fmt.Fprintf(&conf, `server:
  ip-address: 127.0.0.1@%d
  port: %d
  username: ""
  chroot: ""
  zonesdir: %q
  database: ""
  zonelistfile: %q
  xfrdfile: %q
  xfrdir: %q
  pidfile: %q
  logfile: %q
  verbosity: 2
  server-count: 1
  refuse-any: no
  minimal-responses: %s
remote-control:
  control-enable: no
`, port, port, dir, filepath.Join(dir, "zone.list"), filepath.Join(dir, "xfrd.state"), dir,
		filepath.Join(dir, "nsd.pid"), filepath.Join(dir, "nsd.log"), map[bool]string{true: "yes", false: "no"}[cfg.Minimal])
	key := "NOKEY"
	if cfg.KeyName != "" {
		key = cfg.KeyName
		fmt.Fprintf(&conf, "key:\n  name: %q\n  algorithm: hmac-sha256\n  secret: %q\n", cfg.KeyName, cfg.KeySecret)
	}
	for i, z := range cfg.Zones {
		fmt.Fprintf(&conf, "zone:\n  name: %q\n", z.Origin)
		if z.File != "" {
			f := filepath.Join(dir, fmt.Sprintf("zone%d", i))
			if err := os.WriteFile(f, []byte(z.File), 0o644); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&conf, "  zonefile: %q\n", f)
			continue
		}
		for _, p := range z.Primaries {
			host, _, _ := strings.Cut(p, "@")
			fmt.Fprintf(&conf, "  allow-notify: %s %s\n  request-xfr: AXFR %s %s\n", host, key, p, key)
		}
	}
	confPath := filepath.Join(dir, "nsd.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-d", "-c", confPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "nsd.log"))
			t.Logf("nsd output:\n%s\n%s", out.String(), log)
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	q := new(dns.Msg)
	q.SetQuestion(".", dns.TypeSOA)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, _, err := c.Exchange(q, addr); err == nil {
			return addr
		}
	}
	t.Fatalf("nsd did not answer on %s within 10 s:\n%s", addr, out.String())
	return ""
}

// SOASerial is the serial nsd (or any server) at addr answers for origin, or 0 when it
// answers none.
func SOASerial(addr, origin string) uint32 {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(origin), dns.TypeSOA)
	r, _, err := c.Exchange(q, addr)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return 0
	}
	if soa, ok := r.Answer[0].(*dns.SOA); ok {
		return soa.Serial
	}
	return 0
}
