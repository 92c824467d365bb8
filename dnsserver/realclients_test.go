package dnsserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kumadp/kuma-dp/vipalloc"
)

// The real-client test (TestRealClients) runs the resolver on port 53 of a private network
// namespace, with a private /etc/resolv.conf, and resolves through the resolver libraries
// applications use: glibc's getaddrinfo (getent, a C program, Python, Java, Node's
// dns.lookup, Go's cgo resolver), musl's, Go's own resolver, c-ares (Node's dns.resolve*)
// and host. TestRealClientsAgent does the same through the real `kuma-dp run` binary. The
// test binary plays two more roles, chosen by an environment variable (TestMain): the
// server inside the namespace (the package's Server, or kuma-dp run, plus the upstream
// stub), and the Go client.
const (
	roleEnv    = "KUMA_DP_DNSTEST_ROLE"
	roleServe  = "serve"  // arguments: the directory holding table.json and the /etc files; the kuma-dp binary or ""
	roleLookup = "lookup" // arguments: queries, as test/clients/gai.c takes them

	// The resolver's address (what resolv.conf names) and the upstream stub's, both on
	// port 53 of the namespace's loopback: glibc and musl cannot use another port.
	nsResolver4 = "127.0.0.1"
	nsResolver6 = "::1"
	nsUpstream  = "127.0.0.2:53"
)

// runRole runs the test binary in a role other than the test suite and returns its exit code.
func runRole(role string, args []string) int {
	var err error
	switch role {
	case roleServe:
		err = serveInNamespace(args)
	case roleLookup:
		err = goLookup(args)
	default:
		err = fmt.Errorf("unknown %s %q", roleEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

// stubRecords is the upstream stub's zone: every name the resolver does not own that the
// test resolves. Every other name is NXDOMAIN (with an SOA, as real servers answer).
type stubRecord struct{ v4, v6 []string }

var stubZone = func() map[string]stubRecord {
	z := map[string]stubRecord{
		"example.org":        {v4: []string{"192.0.2.10"}, v6: []string{"2001:db8::10"}},
		"v4only.example.org": {v4: []string{"192.0.2.11"}},
		// a Kubernetes-style short name: found only through the first search domain
		"upsvc.default.svc.cluster.local": {v4: []string{"192.0.2.12"}},
	}
	// 60 A (~1 kB: TC without EDNS) and 60 AAAA (~1.7 kB: TC even with EDNS's 1232)
	var big stubRecord
	for i := 1; i <= 60; i++ {
		big.v4 = append(big.v4, "192.0.2."+strconv.Itoa(100+i))
		big.v6 = append(big.v6, "2001:db8::1:"+strconv.FormatInt(int64(i), 16))
	}
	z["big.example.org"] = big
	return z
}()

// serveInNamespace is the server role. The parent started it in new network and mount
// namespaces: it brings loopback up, binds the test's resolv.conf, nsswitch.conf and hosts
// over /etc's, starts the upstream stub and the resolver on port 53, says "ready" on
// stdout and serves until its stdin closes.
func serveInNamespace(args []string) error {
	if len(args) != 2 {
		return errors.New("want two arguments: the test directory and the kuma-dp binary (or \"\")")
	}
	dir, agent := args[0], args[1]
	if err := setUpNamespace(dir); err != nil {
		// what this machine cannot do: the parent skips, saying why
		fmt.Printf("unavailable: %v\n", err)
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, "table.json"))
	if err != nil {
		return err
	}
	var entries []*vipalloc.Entry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return err
	}

	stop, err := startStub(nsUpstream)
	if err != nil {
		return fmt.Errorf("upstream stub: %w", err)
	}
	defer stop()

	addrs := []string{net.JoinHostPort(nsResolver4, "53")}
	v6 := hasIPv6Loopback()
	if v6 {
		addrs = append(addrs, net.JoinHostPort(nsResolver6, "53"))
	}
	if agent != "" {
		return runAgent(dir, agent, v6, stop)
	}
	s, err := New(Config{Addrs: addrs, Upstreams: []string{nsUpstream}, ResolvConf: filepath.Join(dir, "resolv.conf")})
	if err != nil {
		return err
	}
	s.Swap(vipalloc.NewTable(entries, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		return err
	}
	fmt.Printf("ready ipv6=%t\n", v6)
	control(stop)
	cancel()
	return <-done
}

// setUpNamespace makes the fresh namespaces look like a pod's: loopback up, an interface
// with an address, and the test's resolv.conf, nsswitch.conf and hosts over /etc's.
func setUpNamespace(dir string) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	// A pod has an interface with an address besides loopback, and glibc's AI_ADDRCONFIG
	// (getent ahostsv4/ahostsv6) returns nothing without one: a veth pair stands in for
	// eth0 (documentation prefixes; nothing is routed anywhere).
	if err := addPodInterface(); err != nil {
		return fmt.Errorf("pod interface: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, f := range []string{"resolv.conf", "nsswitch.conf", "hosts"} {
		// a symlink (systemd-resolved's resolv.conf) is followed: its target must exist
		if err := unix.Mount(filepath.Join(dir, f), "/etc/"+f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s over /etc/%s: %w", f, f, err)
		}
	}
	return nil
}

// control serves the parent's commands on stdin until it closes (the parent is done, or
// died): "upstream-down" stops the upstream stub (answered "upstream down").
func control(stopStub func()) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "upstream-down":
			stopStub()
			fmt.Println("upstream down")
		default:
			fmt.Printf("unknown command %q\n", sc.Text())
		}
	}
}

func addPodInterface() error {
	names := []string{"kdp0", "kdp1"}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kdp0"}, PeerName: "kdp1"}
	if err := netlink.LinkAdd(veth); err != nil {
		// no veth here: a dummy interface does as well (gVisor has veth, not dummy)
		if err2 := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kdp0"}}); err2 != nil {
			return fmt.Errorf("veth: %v; dummy: %v", err, err2)
		}
		names = names[:1]
	}
	link, err := netlink.LinkByName("kdp0")
	if err != nil {
		return err
	}
	for _, a := range []string{"198.51.100.1/24", "2001:db8:1::1/64"} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		addr.Flags = unix.IFA_F_NODAD // not tentative: AI_ADDRCONFIG ignores tentative addresses
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
	}
	for _, name := range names {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// runAgent runs `kuma-dp run` on the bundled example mesh with its resolver on port 53 and
// the stub as upstream, says "ready" once its ready file is written, and stops it
// (SIGTERM, no drain) when stdin closes.
func runAgent(dir, bin string, v6 bool, stopStub func()) error {
	mesh, err := filepath.Abs("../testdata/mesh")
	if err != nil {
		return err
	}
	ips := nsResolver4
	if v6 {
		ips += "," + nsResolver6
	}
	ready := filepath.Join(dir, "ready.json")
	cmd := exec.Command(bin, "run", "--dataplane-file", filepath.Join(mesh, "dataplane.yaml"),
		"--policies-dir", filepath.Join(mesh, "policies"), "--envoy=false", "--drain-time", "0s",
		"--dns-address", ips, "--dns-proxy-port", "53", "--dns-upstream", nsUpstream,
		"--dns-resolv-conf", filepath.Join(dir, "resolv.conf"), "--admin-address", "127.0.0.1:0",
		"--work-dir", filepath.Join(dir, "work"), "--ready-file", ready, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("kuma-dp run exited before ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return errors.New("kuma-dp run: no ready file after 30 s")
		}
	}
	fmt.Printf("ready ipv6=%t\n", v6)
	control(stopStub)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		return err
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		return errors.New("kuma-dp run did not stop within 15 s of SIGTERM")
	}
}

// startStub serves stubZone on addr, UDP (truncated to the client's size) and TCP.
func startStub(addr string) (func(), error) {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative, m.RecursionAvailable = true, true
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			w.WriteMsg(m)
			return
		}
		q := r.Question[0]
		name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
		rec, ok := stubZone[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 60}
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			for _, a := range rec.v4 {
				h := hdr
				h.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: h, A: net.ParseIP(a)})
			}
		}
		if q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY {
			for _, a := range rec.v6 {
				h := hdr
				h.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: h, AAAA: net.ParseIP(a)})
			}
		}
		if len(m.Answer) == 0 { // NXDOMAIN or NODATA: the SOA of the (made-up) zone
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
				Ns: "stub.", Mbox: "hostmaster.stub.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 60})
		}
		writeTruncated(w, r, m)
	})
	u, l, err := bindPair(netip.MustParseAddrPort(addr))
	if err != nil {
		return nil, err
	}
	return serveUDPTCP(u, l, h), nil
}

// goLookup is the Go client role: Go's resolver (pure Go or cgo, as GODEBUG=netdns says)
// resolves each query and prints the result as test/clients/gai.c does.
func goLookup(queries []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range queries {
		if len(q) < 3 || q[1] != ':' {
			return fmt.Errorf("query %q: want F:NAME", q)
		}
		fam, name := q[0], q[2:]
		var out []string
		var err error
		switch fam {
		case 'p':
			out, err = net.DefaultResolver.LookupAddr(ctx, name)
			for i := range out {
				out[i] = strings.TrimSuffix(out[i], ".")
			}
		case '0', '4', '6':
			network := map[byte]string{'0': "ip", '4': "ip4", '6': "ip6"}[fam]
			var ips []net.IP
			ips, err = net.DefaultResolver.LookupIP(ctx, network, name)
			for _, ip := range ips {
				out = append(out, ip.String())
			}
		default:
			return fmt.Errorf("query %q: family must be 0, 4, 6 or p", q)
		}
		if err != nil {
			kind := "other"
			var de *net.DNSError
			var ae *net.AddrError
			if errors.As(err, &ae) && ae.Err == "no suitable address found" {
				// the cgo resolver's answer for a name without an address of the family
				kind = "notfound"
			} else if errors.As(err, &de) {
				switch {
				case de.IsNotFound:
					kind = "notfound"
				case de.IsTimeout, de.IsTemporary:
					kind = "again"
				}
			}
			fmt.Printf("%c\t%s\terr\t%s\t%v\n", fam, name, kind, err)
			continue
		}
		fmt.Printf("%c\t%s\tok\t%s\n", fam, name, strings.Join(out, ","))
	}
	return nil
}

// nsEnv is the running namespace seen from the test: the server's pid (clients run in its
// namespaces through nsenter) and the resolv.conf bound over its /etc/resolv.conf.
type nsEnv struct {
	pid        int
	nsenter    string
	resolvConf string
	ipv6       bool
	stdin      io.WriteCloser // commands to the server (control)
	lines      chan string    // its answers
}

// startNamespace starts the server role in new network and mount namespaces.
func startNamespace(t *testing.T, dir, agent string) *nsEnv {
	t.Helper()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter (util-linux) not installed: skipping the real-client tests")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, dir, agent)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleServe)
	// No Pdeathsig (it fires when the forking thread exits): the server stops when its
	// stdin closes, which the end of this process does too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot create network and mount namespaces (%v): skipping the real-client tests", err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("server in the namespace: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Errorf("server in the namespace did not stop")
		}
	})
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	ns := &nsEnv{pid: cmd.Process.Pid, nsenter: nsenter, resolvConf: filepath.Join(dir, "resolv.conf"),
		stdin: stdin, lines: lines}
	l := ns.reply(t, 45*time.Second) // beyond runAgent's own 30 s
	if reason, ok := strings.CutPrefix(l, "unavailable: "); ok {
		t.Skipf("cannot set up the test namespace here (%s): skipping the real-client tests", reason)
	}
	if !strings.HasPrefix(l, "ready ") {
		t.Fatalf("server in the namespace did not start (said %q)", l)
	}
	ns.ipv6 = strings.Contains(l, "ipv6=true")
	return ns
}

// reply is the server's next line on stdout.
func (ns *nsEnv) reply(t *testing.T, wait time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-ns.lines:
		if !ok {
			t.Fatal("server in the namespace exited")
		}
		return l
	case <-time.After(wait):
		t.Fatalf("server in the namespace: no answer after %s", wait)
	}
	return ""
}

// upstreamDown stops the upstream stub: from now on every forwarded query fails.
func (ns *nsEnv) upstreamDown(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(ns.stdin, "upstream-down\n"); err != nil {
		t.Fatal(err)
	}
	if l := ns.reply(t, 10*time.Second); l != "upstream down" {
		t.Fatalf("server in the namespace: %q, want \"upstream down\"", l)
	}
}

// command runs name with args inside the namespace.
func (ns *nsEnv) command(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(ns.nsenter, append([]string{"-t", strconv.Itoa(ns.pid), "-n", "-m", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// setResolvConf rewrites the resolv.conf the namespace sees (in place: the bind mount
// holds the inode).
func (ns *nsEnv) setResolvConf(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(ns.resolvConf, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
