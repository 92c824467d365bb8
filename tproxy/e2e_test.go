package tproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTransparentProxyInNetns installs the rules in a fresh network namespace with each
// backend and proves them with real traffic: DNS of any nameserver (UDP, TCP, glibc) reaches
// the resolver, outbound TCP reaches the outbound listener with its original destination,
// inbound TCP reaches the inbound listener, the agent's own traffic goes out untouched;
// re-install is idempotent, a changed or stacked install is reconciled, and uninstall leaves
// iptables-save and the routes exactly as they were, foreign chains included.
func TestTransparentProxyInNetns(t *testing.T) {
	for i, name := range []string{"legacy", "nft"} {
		t.Run(name, func(t *testing.T) {
			requireNetns(t, "dig", "getent", "bash", "timeout")
			b := backend{name: name}
			if !b.available([]Family{IPv4, IPv6}) {
				t.Skipf("%s not found: install the Debian package iptables", b.bin(IPv4, "restore"))
			}
			testInNetns(t, i, b)
		})
	}
}

func testInNetns(t *testing.T, idx int, b backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	n := newTestNS(t, idx)
	n.plantForeign(t, b)
	upPort := n.upstream(t)
	dnsPort, outPort, inPort, localPort := n.helper(t)

	c := DefaultConfig()
	c.NetNS = n.name
	c.RedirectDNSPort, c.RedirectOutboundPort, c.RedirectInboundPort = dnsPort, outPort, inPort
	c.KumaDPUser = "5678"
	c.StateFile = filepath.Join(t.TempDir(), "state.json")

	// Auto-detection finds the backend that holds the (foreign) rules.
	if got, err := Backend(ctx, c); err != nil || got != b.name {
		t.Fatalf("Backend(auto) = %q, %v; want %q (the one holding the rules)", got, err, b.name)
	}
	c.Executables = "auto"
	before, beforeNet := n.saveAll(t, b), n.netState(t)
	log := testLogger(t)

	if err := Install(ctx, c, log); err != nil {
		t.Fatal(err)
	}
	installed := n.saveAll(t, b)
	if err := Install(ctx, c, log); err != nil {
		t.Fatal(err)
	}
	if again := n.saveAll(t, b); again != installed {
		t.Fatalf("second install changed the rules:\n%s", lineDiff(strings.Split(installed, "\n"), strings.Split(again, "\n")))
	}
	if d, err := Verify(ctx, c); err != nil || d != "" {
		t.Fatalf("Verify after install = %q, %v", d, err)
	}
	routes := n.netState(t)
	for _, want := range []string{"240.0.0.0/4 dev eth0", "fd00:fd00::/64 dev eth0", "inet6 ::6/128"} {
		if !strings.Contains(routes, want) {
			t.Errorf("after install, %q missing from:\n%s", want, routes)
		}
	}

	t.Run("traffic", func(t *testing.T) { checkTraffic(t, n, upPort, localPort, inPort) })
	t.Run("reconcile", func(t *testing.T) {
		// Another config over ours: reconciled (no stacking), Verify shows the difference.
		other := c
		other.ExcludeOutboundPorts = []uint16{9999}
		other.RedirectDNS = false
		if err := Install(ctx, other, log); err != nil {
			t.Fatal(err)
		}
		if d, err := Verify(ctx, other); err != nil || d != "" {
			t.Fatalf("Verify(other) = %q, %v", d, err)
		}
		d, err := Verify(ctx, c)
		if err != nil || !strings.Contains(d, "- nat: -A KUMA_MESH_DNS") || !strings.Contains(d, "+ nat: -A KUMA_MESH_OUTBOUND -p tcp -m tcp --dport 9999") {
			t.Fatalf("Verify(original) over the other install = %q, %v; want missing DNS rules and an unexpected port 9999 rule", d, err)
		}
		// A crashed older agent that stacked a second copy of its jumps.
		rules, _ := Rules(other, IPv4)
		jumps := "*nat\n"
		for _, l := range strings.Split(rules, "\n") {
			if strings.HasPrefix(l, "-I ") {
				jumps += l + "\n"
			}
		}
		if err := b.restore(ctx, c, IPv4, jumps+"COMMIT\n"); err != nil {
			t.Fatal(err)
		}
		if err := Install(ctx, c, log); err != nil {
			t.Fatal(err)
		}
		if got := n.saveAll(t, b); got != installed {
			t.Fatalf("reconciled install differs from a clean one:\n%s", lineDiff(strings.Split(installed, "\n"), strings.Split(got, "\n")))
		}
	})

	t.Run("ipv4 mode removes our IPv6 rules", func(t *testing.T) {
		v4 := c
		v4.IPFamilyMode = "ipv4"
		if d, err := Verify(ctx, v4); err != nil || !strings.Contains(d, "ipv6 (") || !strings.Contains(d, "+ nat: -A KUMA_MESH_OUTBOUND") {
			t.Fatalf("Verify(ipv4) over a dual-stack install = %q, %v; want the IPv6 rules as unexpected", d, err)
		}
		if err := Install(ctx, v4, log); err != nil {
			t.Fatal(err)
		}
		if d, err := Verify(ctx, v4); err != nil || d != "" {
			t.Fatalf("Verify(ipv4) = %q, %v", d, err)
		}
		if live := liveOurs(ctx, c, b, IPv6); len(live) != 0 {
			t.Fatalf("IPv6 rules of ours left: %v", view(live))
		}
		if err := Install(ctx, c, log); err != nil {
			t.Fatal(err)
		}
		if got := n.saveAll(t, b); got != installed {
			t.Fatalf("back to dual-stack, the rules differ from the first install:\n%s", lineDiff(strings.Split(installed, "\n"), strings.Split(got, "\n")))
		}
	})

	t.Run("switching backend moves the rules", func(t *testing.T) {
		other := backend{name: "nft"}
		if b.name == "nft" {
			other = backend{name: "legacy"}
		}
		oc := c
		oc.Executables = other.name
		if err := Install(ctx, oc, log); err != nil {
			t.Fatal(err)
		}
		if n := len(parseOurs(n.saveAll(t, b))); n != 0 {
			t.Fatalf("%d tables of ours left in %s after installing with %s", n, b.name, other.name)
		}
		if d, err := Verify(ctx, oc); err != nil || d != "" {
			t.Fatalf("Verify(%s) = %q, %v", other.name, d, err)
		}
		// A copy of ours left in the backend not used acts on every packet too: verify
		// shows it, install removes it.
		stale, _ := Rules(c, IPv4)
		if err := b.restore(ctx, c, IPv4, stale); err != nil {
			t.Fatal(err)
		}
		if d, err := Verify(ctx, oc); err != nil || !strings.Contains(d, "ipv4 ("+b.name+"), not the backend in use:") || !strings.Contains(d, "+ nat: -A OUTPUT") {
			t.Fatalf("Verify(%s) with a copy of ours in %s = %q, %v", other.name, b.name, d, err)
		}
		if err := Install(ctx, oc, log); err != nil {
			t.Fatal(err)
		}
		if d, err := Verify(ctx, oc); err != nil || d != "" {
			t.Fatalf("Verify(%s) after install = %q, %v", other.name, d, err)
		}
		// Auto-detection now follows our rules to the other backend, though the foreign
		// rules are in this one.
		if got, err := Backend(ctx, c); err != nil || got != other.name {
			t.Fatalf("Backend(auto) = %q, %v; want %q, which holds our rules", got, err, other.name)
		}
		// And back.
		c.Executables = b.name
		if err := Install(ctx, c, log); err != nil {
			t.Fatal(err)
		}
		c.Executables = "auto"
		if got := n.saveAll(t, b); got != installed {
			t.Fatalf("back on %s, the rules differ from the first install:\n%s", b.name, lineDiff(strings.Split(installed, "\n"), strings.Split(got, "\n")))
		}
		if n := len(parseOurs(n.saveAll(t, other))); n != 0 {
			t.Fatalf("%d tables of ours left in %s", n, other.name)
		}
	})

	if err := Uninstall(ctx, c, log); err != nil {
		t.Fatal(err)
	}
	if after := n.saveAll(t, b); after != before {
		t.Fatalf("uninstall did not restore iptables-save:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
	}
	if afterNet := n.netState(t); afterNet != beforeNet {
		t.Fatalf("uninstall did not restore routes/addresses:\nbefore:\n%s\nafter:\n%s", beforeNet, afterNet)
	}
	if _, err := os.Stat(statePath(c)); statePath(c) == c.StateFile || !os.IsNotExist(err) {
		t.Errorf("state file still there after uninstall: %v", err)
	}
	if !strings.Contains(before, "DOCKER_OUTPUT") || !strings.Contains(before, "CNI-FORWARD") {
		t.Fatalf("foreign chains were not planted:\n%s", before)
	}
	if d, err := Verify(ctx, c); err != nil || !strings.Contains(d, "- nat: -A OUTPUT") {
		t.Fatalf("Verify after uninstall = %q, %v; want every rule missing", d, err)
	}
}

func checkTraffic(t *testing.T, n *testNS, upPort, localPort, inPort uint16) {
	up := netip.AddrPortFrom(n.host4, upPort)
	// The pod's own addresses: an application reaching a local service through them is left
	// alone (it reaches the inbound listener directly: "inbound orig=" with its own port);
	// Envoy calling its workload through them goes through the inbound port.
	own4, own6 := netip.AddrPortFrom(n.ns4, inPort), netip.AddrPortFrom(n.ns6, inPort)
	app4, app6 := netip.AddrPortFrom(n.ns4, 8080), netip.AddrPortFrom(n.ns6, 8080)
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.53"), localPort)
	cases := []struct {
		name string
		uid  int
		argv []string
		want string // exact output, or a line that must be present for getent
	}{
		{"app dig udp to the upstream", testAppUID, []string{"dig", "+short", "+time=2", "+tries=1", "@" + n.host4.String(), "httpbin.mesh", "A"}, "240.0.0.1"},
		{"app dig tcp to the upstream", testAppUID, []string{"dig", "+tcp", "+short", "+time=2", "+tries=1", "@" + n.host4.String(), "httpbin.mesh", "A"}, "240.0.0.1"},
		{"app dig to 127.0.0.53 (nothing listens there)", testAppUID, []string{"dig", "+short", "+time=2", "+tries=1", "@127.0.0.53", "httpbin.mesh", "A"}, "240.0.0.1"},
		{"app dig to Docker's 127.0.0.11 (ahead of its DNAT)", testAppUID, []string{"dig", "+short", "+time=2", "+tries=1", "@127.0.0.11", "httpbin.mesh", "A"}, "240.0.0.1"},
		{"app dig over IPv6", testAppUID, []string{"dig", "+short", "+time=2", "+tries=1", "@" + n.host6.String(), "httpbin.mesh", "AAAA"}, "fd00:fd00::1"},
		{"app glibc getent", testAppUID, []string{"getent", "ahostsv4", "httpbin.mesh"}, "240.0.0.1       STREAM httpbin.mesh"},
		{"app glibc getent ahosts", testAppUID, []string{"getent", "ahosts", "httpbin.mesh"}, "fd00:fd00::1    STREAM httpbin.mesh"},
		{"app tcp to the VIP", testAppUID, bashTCP(netip.MustParseAddrPort("240.0.0.1:80")), "orig=240.0.0.1:80"},
		{"app tcp to the IPv6 VIP", testAppUID, bashTCP(netip.MustParseAddrPort("[fd00:fd00::1]:80")), "orig=[fd00:fd00::1]:80"},
		{"app tcp to the upstream", testAppUID, bashTCP(up), "orig=" + up.String()},
		{"agent dig not redirected", testAgentUID, []string{"dig", "+short", "+time=2", "+tries=1", "@" + n.host4.String(), "httpbin.mesh", "A"}, "192.0.2.7"},
		{"agent dig to Docker's 127.0.0.11 reaches Docker's resolver", testAgentUID, []string{"dig", "+short", "+time=2", "+tries=1", "@127.0.0.11", "httpbin.mesh", "A"}, dockerAnswer.String()},
		{"agent tcp not redirected", testAgentUID, bashTCP(up), "upstream"},
		{"agent tcp to 127.0.0.53 not redirected", testAgentUID, bashTCP(local), "local"},
		{"app tcp to 127.0.0.53 not redirected", testAppUID, bashTCP(local), "local"},
		{"app tcp to its own address not redirected", testAppUID, bashTCP(own4), "inbound orig=" + own4.String()},
		{"app tcp to its own IPv6 address not redirected", testAppUID, bashTCP(own6), "inbound orig=" + own6.String()},
		{"agent tcp to the pod address goes inbound", testAgentUID, bashTCP(app4), "inbound orig=" + app4.String()},
		{"agent tcp to the pod IPv6 address goes inbound", testAgentUID, bashTCP(app6), "inbound orig=" + app6.String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := n.exec(tc.uid, tc.argv[0], tc.argv[1:]...)
			if err != nil {
				t.Fatalf("%v: %v (output %q)", tc.argv, err, out)
			}
			if strings.HasPrefix(tc.argv[0], "getent") {
				if !strings.Contains(out+"\n", tc.want+"\n") {
					t.Fatalf("%v = %q, want a line %q", tc.argv, out, tc.want)
				}
				return
			}
			if out != tc.want {
				t.Fatalf("%v = %q, want %q", tc.argv, out, tc.want)
			}
		})
	}
	t.Run("inbound from the root namespace", func(t *testing.T) {
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(n.ns4, 8080), netip.AddrPortFrom(n.ns6, 8080)} {
			if got, want := tcpLine(t, dst), "inbound orig="+dst.String(); got != want {
				t.Errorf("dial %s: got %q, want %q", dst, got, want)
			}
		}
	})
	t.Run("conntrack zones split (kumahq/kuma#3459)", func(t *testing.T) {
		if _, err := exec.LookPath("conntrack"); err != nil {
			t.Skip("conntrack not found: Debian package conntrack")
		}
		// The applications' redirected queries live in zone 2, the agent's upstream query in zone 1.
		app, err := n.exec(0, "conntrack", "-L", "-p", "udp", "--zone", "2")
		if err != nil || !strings.Contains(app, "dport=53") || !strings.Contains(app, "zone=2") {
			t.Errorf("zone 2 should hold the applications' DNS flows: %v\n%s", err, app)
		}
		agent, err := n.exec(0, "conntrack", "-L", "-p", "udp", "--zone", "1")
		want := "dst=" + n.host4.String() + " sport="
		if err != nil || !strings.Contains(agent, want) || !strings.Contains(agent, "zone=1") {
			t.Errorf("zone 1 should hold the agent's upstream query (%s): %v\n%s", want, err, agent)
		}
	})
}

// TestIPv6DisabledFallsBackToIPv4: in a namespace without IPv6 (disabled by sysctl), a
// dual-stack install puts IPv4 rules only, and Verify agrees.
func TestIPv6DisabledFallsBackToIPv4(t *testing.T) {
	requireNetns(t, "iptables-nft-restore", "ip6tables-nft-restore", "sysctl")
	ns := fmt.Sprintf("kdp-tp6-%d", os.Getpid()%100000)
	mustRun(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	mustRun(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.lo.disable_ipv6=1")
	mustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")
	c := DefaultConfig()
	c.NetNS, c.Executables, c.StateFile = ns, "nft", filepath.Join(t.TempDir(), "state.json")
	ctx := context.Background()
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if d, err := Verify(ctx, c); err != nil || strings.Contains(d, "ipv6") || strings.Contains(d, "nat:") {
		t.Fatalf("Verify = %q, %v; want no rule difference", d, err)
	}
	v6 := mustRun(t, "ip", "netns", "exec", ns, "ip6tables-nft-save")
	if strings.Contains(v6, CommentPrefix) {
		t.Fatalf("IPv6 rules installed with IPv6 disabled:\n%s", v6)
	}
	if v4 := mustRun(t, "ip", "netns", "exec", ns, "iptables-nft-save"); !strings.Contains(v4, "kuma-dp/outbound") {
		t.Fatalf("IPv4 rules missing:\n%s", v4)
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
