package tproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// UIDs in the namespace tests: the agent's (its traffic is never redirected) and an app's.
const (
	testAgentUID = 5678
	testAppUID   = 1234
)

// nftNamespace is the usual start of a test on the nft backend: the tools it needs (and the
// backend's IPv4 restore), a fresh namespace idx, and a context that ends with the test or
// after 30 s.
func nftNamespace(t *testing.T, idx int, tools ...string) (backend, *testNS, context.Context) {
	t.Helper()
	b := backend{name: "nft"}
	requireNetns(t, append(tools, b.bin(IPv4, "restore"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return b, newTestNS(t, idx), ctx
}

// requireNetns skips unless the test can create network namespaces and run the tools.
func requireNetns(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables): run as root, as CI does")
	}
	for _, tool := range append([]string{"ip", "setpriv"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found in PATH: scripts/test-deps.sh installs it (Debian packages iptables, dnsutils, iproute2)", tool)
		}
	}
	netnsOnce.Do(func() {
		probe := fmt.Sprintf("kdp-probe-%d", os.Getpid())
		if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
			netnsErr = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			return
		}
		_ = exec.Command("ip", "netns", "del", probe).Run()
	})
	if netnsErr != nil {
		t.Skipf("cannot create a network namespace (a container without CAP_SYS_ADMIN?): %v", netnsErr)
	}
}

var (
	netnsOnce sync.Once
	netnsErr  error
)

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// testNS is a network namespace joined to the root namespace by a veth pair, with no default
// route (so the VIP ranges need the route Install adds).
type testNS struct {
	name         string
	host4, ns4   netip.Addr // the root side (the "upstream") and the namespace side
	host6, ns6   netip.Addr
	resolvConfOK bool
}

func newTestNS(t *testing.T, idx int) *testNS {
	t.Helper()
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, idx)
	n := &testNS{name: "kdp-tp-" + id}
	hostIf := "kdph" + id
	sub := os.Getpid()%250 + 1
	n.host4 = netip.AddrFrom4([4]byte{10, byte(200 + idx), byte(sub), 2})
	n.ns4 = netip.AddrFrom4([4]byte{10, byte(200 + idx), byte(sub), 1})
	n.host6 = netip.MustParseAddr(fmt.Sprintf("fd6b:6470:%x:%x::2", idx, sub))
	n.ns6 = netip.MustParseAddr(fmt.Sprintf("fd6b:6470:%x:%x::1", idx, sub))
	mustRun(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", n.name).Run()
		_ = os.RemoveAll(filepath.Join("/etc/netns", n.name))
	})
	mustRun(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.name)
	mustRun(t, "ip", "addr", "add", n.host4.String()+"/24", "dev", hostIf)
	mustRun(t, "ip", "-6", "addr", "add", n.host6.String()+"/64", "dev", hostIf, "nodad")
	mustRun(t, "ip", "link", "set", hostIf, "up")
	ns := []string{"netns", "exec", n.name, "ip"}
	mustRun(t, "ip", append(ns, "link", "set", "lo", "up")...)
	mustRun(t, "ip", append(ns, "addr", "add", n.ns4.String()+"/24", "dev", "eth0")...)
	mustRun(t, "ip", append(ns, "-6", "addr", "add", n.ns6.String()+"/64", "dev", "eth0", "nodad")...)
	mustRun(t, "ip", append(ns, "link", "set", "eth0", "up")...)
	// glibc in the namespace asks the upstream; `ip netns exec` bind-mounts this file.
	dir := filepath.Join("/etc/netns", n.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("nameserver %s\noptions timeout:2 attempts:1\n", n.host4)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// exec runs a command inside the namespace as uid (0 for root) and returns its stdout.
func (n *testNS) exec(uid int, name string, args ...string) (string, error) {
	argv := []string{"netns", "exec", n.name}
	if uid != 0 {
		argv = append(argv, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups")
	}
	argv = append(argv, "timeout", "5", name)
	out, err := exec.Command("ip", append(argv, args...)...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = fmt.Errorf("%v: %s", err, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// saveAll is iptables-save of both families without comments and counters.
func (n *testNS) saveAll(t *testing.T, b backend) string {
	t.Helper()
	var s strings.Builder
	for _, f := range []Family{IPv4, IPv6} {
		// Stdout alone: iptables-nft-save warns on stderr when legacy tables are present,
		// and mixed in, the warning can land inside a rule.
		out, err := exec.Command("ip", "netns", "exec", n.name, b.bin(f, "save")).Output()
		if err != nil {
			t.Fatalf("%s: %v", b.bin(f, "save"), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "#") {
				s.WriteString(counters.ReplaceAllString(line, "[0:0]") + "\n")
			}
		}
	}
	return s.String()
}

func (n *testNS) netState(t *testing.T) string {
	return mustRun(t, "ip", "netns", "exec", n.name, "sh", "-c", "ip route show table main; ip -6 route show table main; ip addr show dev lo")
}

// plantForeign adds rules others own in every table, to prove install and uninstall leave
// them byte-identical and traffic still flows: Docker's (its DNS DNAT, its published-port
// chain with addrtype jumps, MASQUERADE and the SNAT of its resolver's answers), a CNI's
// chains, Calico-like cali- chains in raw, mangle, nat and filter, and a stateful firewall
// with DROP policies on INPUT, OUTPUT and FORWARD.
func (n *testNS) plantForeign(t *testing.T, b backend) {
	t.Helper()
	firewall := `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT DROP [0:0]
:CNI-FORWARD - [0:0]
:cali-INPUT - [0:0]
-A INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m conntrack --ctstate DNAT -j ACCEPT
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A OUTPUT -o lo -j ACCEPT
-A OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A OUTPUT -o eth0 -j ACCEPT
-A CNI-FORWARD -m comment --comment "CNI firewall plugin rules (ingressPolicy: same-bridge)" -j RETURN
-A cali-INPUT -p udp -m udp --dport 4789 -m comment --comment "cali:PajejrV4aFdkZojI" -j DROP
COMMIT
*mangle
:cali-PREROUTING - [0:0]
-A PREROUTING -m comment --comment "cali:6gwbT8clXdHdC1b1" -j cali-PREROUTING
-A cali-PREROUTING -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "cali:6BJqBjBC7crtA-7-" -j ACCEPT
COMMIT
*raw
:cali-PREROUTING - [0:0]
:cali-OUTPUT - [0:0]
-A PREROUTING -m comment --comment "cali:6gwbT8clXdHdC1b1" -j cali-PREROUTING
-A OUTPUT -m comment --comment "cali:tVnHkvAo15HuiPy0" -j cali-OUTPUT
-A cali-PREROUTING -m comment --comment "cali:XFX5xbM8B9qR10JG" -j MARK --set-xmark 0x0/0xf0000
-A cali-OUTPUT -m comment --comment "cali:njdnLwYeGqBJyh3D" -j MARK --set-xmark 0x0/0xf0000
COMMIT
`
	v4 := firewall + `*nat
:DOCKER - [0:0]
:DOCKER_OUTPUT - [0:0]
:DOCKER_POSTROUTING - [0:0]
:cali-OUTPUT - [0:0]
:cali-nat-outgoing - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT
-A OUTPUT -m comment --comment "cali:tVnHkvAo15HuiPy0" -j cali-OUTPUT
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A POSTROUTING -d 127.0.0.11/32 -j DOCKER_POSTROUTING
-A POSTROUTING -s 10.244.0.0/16 -m comment --comment "cni masquerade" -j MASQUERADE
-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-nat-outgoing
-A DOCKER -i docker0 -j RETURN
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8443 -j DNAT --to-destination 172.17.0.2:443
-A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:40000
-A DOCKER_POSTROUTING -s 127.0.0.11/32 -p udp -m udp --sport 40000 -j SNAT --to-source :53
-A cali-nat-outgoing -s 10.245.0.0/16 -m comment --comment "cali:flqWnvo8yq4ULQLa" -j MASQUERADE --random-fully
COMMIT
*raw
-A PREROUTING -p udp -m udp --dport 4789 -m comment --comment "cni vxlan" -j NOTRACK
COMMIT
`
	// IPv6 needs neighbour discovery through the firewall.
	v6 := strings.Replace(firewall, "-A INPUT -i lo -j ACCEPT\n", "-A INPUT -i lo -j ACCEPT\n-A INPUT -p ipv6-icmp -j ACCEPT\n", 1) + `*nat
:DOCKER_OUTPUT - [0:0]
-A OUTPUT -d fd00:11::11/128 -j DOCKER_OUTPUT
COMMIT
*raw
-A PREROUTING -p udp -m udp --dport 4789 -j NOTRACK
COMMIT
`
	for f, in := range map[Family]string{IPv4: v4, IPv6: v6} {
		cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(f, "restore"), "--noflush", "--wait=5")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("plant foreign %s rules: %v\n%s", f, err, out)
		}
	}
}

// helper starts the stand-in agent inside the namespace and returns its ports.
// helperConfig starts the namespace's helper (see helper) and returns a configuration of
// backend b redirecting to it, its state file in a test directory, and the helper's local
// port.
func helperConfig(t *testing.T, n *testNS, b backend) (Config, uint16) {
	t.Helper()
	dnsPort, outPort, inPort, localPort := n.helper(t)
	c := DefaultConfig()
	c.NetNS, c.Executables, c.StateFile = n.name, b.name, filepath.Join(t.TempDir(), "state.json")
	c.RedirectDNSPort, c.RedirectOutboundPort, c.RedirectInboundPort = dnsPort, outPort, inPort
	return c, localPort
}

func (n *testNS) helper(t *testing.T) (dnsPort, outPort, inPort, localPort uint16) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.name, exe, "-test.run=^TestTproxyHelperProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", helperEnv, testAgentUID))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper did not start: %v", err)
	}
	if _, err := fmt.Sscanf(line, "ready %d %d %d %d", &dnsPort, &outPort, &inPort, &localPort); err != nil {
		t.Fatalf("helper said %q: %v", line, err)
	}
	return dnsPort, outPort, inPort, localPort
}

// upstream serves, in the root namespace on the veth's host side, what the namespace reaches
// when it is NOT redirected: DNS answering httpbin.mesh with 192.0.2.7, and a TCP listener
// answering "upstream".
func (n *testNS) upstream(t *testing.T) (tcpPort uint16) {
	t.Helper()
	h := answerer(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7"))
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(n.host4, 53).String())
	if err != nil {
		t.Fatalf("upstream DNS: %v", err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: h}
	go func() { _ = udp.ActivateAndServe() }()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.host4, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "upstream\n")
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = ln.Close()
		<-done
	})
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, nil))
}

// testLoggerTo logs to the test and into w.
func testLoggerTo(t *testing.T, w *strings.Builder) *slog.Logger {
	var mu sync.Mutex
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		w.Write(p)
		t.Log(strings.TrimSpace(string(p)))
		return len(p), nil
	}), nil))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func tcpLine(t *testing.T, addr netip.AddrPort) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), 3*time.Second)
	if err != nil {
		return "dial error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func bashTCP(addr netip.AddrPort) []string {
	return []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -n1 <&3", addr.Addr(), addr.Port())}
}
