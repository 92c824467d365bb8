package tproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A host that routes for others - a VM running Docker, its containers behind a bridge and
// a MASQUERADE - installs the transparent proxy for its own workload. The containers'
// connections pass through PREROUTING on their way out, but they are not inbound traffic
// of this host: they must reach their destination, not the inbound listener. And the
// host's own inbound traffic is still redirected.
func TestForwardedTrafficIsNotInbound(t *testing.T) {
	for i, b := range []backend{{name: "legacy"}, {name: "nft"}} {
		t.Run(b.name, func(t *testing.T) {
			requireNetns(t, "bash", "timeout", "sysctl", "dig", b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
			testForwarded(t, 17+i, b)
		})
	}
}

func testForwarded(t *testing.T, idx int, b backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newTestNS(t, idx)
	// The "container": a namespace behind n, routed and masqueraded by n, as Docker does.
	ctr := fmt.Sprintf("kdp-ctr-%d%d", os.Getpid()%10000, idx)
	mustRun(t, "ip", "netns", "add", ctr)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ctr).Run() })
	sub := fmt.Sprintf("10.%d.%d", 150+idx, os.Getpid()%250+1)
	mustRun(t, "ip", "-n", n.name, "link", "add", "docker0", "type", "veth", "peer", "name", "eth0", "netns", ctr)
	mustRun(t, "ip", "-n", n.name, "addr", "add", sub+".1/24", "dev", "docker0")
	mustRun(t, "ip", "-n", n.name, "link", "set", "docker0", "up")
	mustRun(t, "ip", "-n", ctr, "addr", "add", sub+".2/24", "dev", "eth0")
	mustRun(t, "ip", "-n", ctr, "link", "set", "eth0", "up")
	mustRun(t, "ip", "-n", ctr, "link", "set", "lo", "up")
	mustRun(t, "ip", "-n", ctr, "route", "add", "default", "via", sub+".1")
	mustRun(t, "ip", "netns", "exec", n.name, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	masq := fmt.Sprintf("*nat\n-A POSTROUTING -s %s.0/24 ! -o docker0 -j MASQUERADE\nCOMMIT\n", sub)
	cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
	cmd.Stdin = strings.NewReader(masq)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plant the MASQUERADE: %v\n%s", err, out)
	}
	upPort := n.upstream(t)
	up := netip.AddrPortFrom(n.host4, upPort)
	fromContainer := func() string {
		argv := append([]string{"netns", "exec", ctr, "timeout", "5"}, bashTCP(up)...)
		out, _ := exec.Command("ip", argv...).Output()
		return strings.TrimSpace(string(out))
	}
	if got := fromContainer(); got != "upstream" {
		t.Fatalf("before install, the container reaches %q, want upstream (the test's routing is wrong)", got)
	}
	c, _ := helperConfig(t, n, b)
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if got := fromContainer(); got != "upstream" {
		t.Errorf("a container's connection through the host reached %q, want upstream (not the inbound listener)", got)
	}
	// The container's DNS goes through the host too: its answer must find its way back
	// through the MASQUERADE (the conntrack zone split must not catch it).
	out, err := exec.Command("ip", "netns", "exec", ctr, "timeout", "5", "dig", "+short", "+time=2", "+tries=1", "@"+n.host4.String(), "httpbin.mesh", "A").Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != "192.0.2.7" {
		t.Errorf("a container's DNS through the host = %q, %v; want the upstream's answer 192.0.2.7", got, err)
	}
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(n.ns4, 8080), netip.AddrPortFrom(n.ns6, 8080)} {
		if got, want := tcpLine(t, dst), "inbound orig="+dst.String(); got != want {
			t.Errorf("inbound to the host %s: got %q, want %q", dst, got, want)
		}
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}

// A host where the VIP range is routed through the loopback (ip route add 240.0.0.0/4 dev
// lo, as some guides do to make fake IPs routable): install finds the range covered, and
// the applications' connections to VIPs leave through lo. They are not the applications
// talking to themselves - no local address is there - and must still reach Envoy.
func TestVIPRoutedThroughLoopback(t *testing.T) {
	b, n, ctx := nftNamespace(t, 26, "bash", "timeout")
	mustRun(t, "ip", "-n", n.name, "route", "add", "240.0.0.0/4", "dev", "lo")
	c, localPort := helperConfig(t, n, b)
	c.IPFamilyMode = "ipv4"
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddrPort("240.0.0.1:80")
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.53"), localPort)
	own := netip.AddrPortFrom(n.ns4, c.RedirectInboundPort)
	for _, tc := range []struct {
		name string
		dst  netip.AddrPort
		want string
	}{
		{"VIP through lo goes to Envoy", vip, "orig=" + vip.String()},
		{"the loopback stays local", local, "local"},
		{"its own address stays local", own, "inbound orig=" + own.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := n.exec(testAppUID, bashTCP(tc.dst)[0], bashTCP(tc.dst)[1:]...); out != tc.want {
				t.Errorf("app tcp to %s = %q, %v; want %q", tc.dst, out, err, tc.want)
			}
		})
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
