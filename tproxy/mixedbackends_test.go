package tproxy

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Both backends hold rules, as on a host where Docker writes its DNS DNAT through
// iptables-nft while other tools filter through iptables-legacy: every packet meets both,
// and between the two nat tables the one the kernel registered last acts first - not
// ours to choose. Our jumps are ahead of Docker's DNAT only in the same table, so auto
// detection must follow the nat rules, not the larger rule count: an application's query
// to Docker's 127.0.0.11 went to Docker's resolver instead of ours.
func TestAutoBackendFollowsForeignNAT(t *testing.T) {
	requireNetns(t, "dig", "iptables-legacy-restore", "iptables-nft-restore", "ip6tables-nft-restore")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newTestNS(t, 20)
	restore := func(bin, in string) {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", n.name, bin, "--noflush", "--wait=5")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
	}
	// The legacy nat table exists first (an earlier iptables-legacy call), so nft's,
	// registered after it, acts first.
	mustRun(t, "ip", "netns", "exec", n.name, "iptables-legacy", "-t", "nat", "-S")
	filter := "*filter\n"
	for i := range 8 {
		filter += fmt.Sprintf("-A INPUT -s 10.1.%d.0/24 -j ACCEPT\n", i)
	}
	restore("iptables-legacy-restore", filter+"COMMIT\n")
	restore("iptables-nft-restore", `*nat
:DOCKER_OUTPUT - [0:0]
-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT
-A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:40000
COMMIT
`)
	// A nat rule in legacy too: it acts beside ours whatever we choose, and install says so.
	restore("iptables-legacy-restore", "*nat\n-A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE\nCOMMIT\n")
	dnsPort, outPort, inPort, _ := n.helper(t)
	c := DefaultConfig()
	c.NetNS, c.IPFamilyMode, c.StateFile = n.name, "ipv4", filepath.Join(t.TempDir(), "state.json")
	c.RedirectDNSPort, c.RedirectOutboundPort, c.RedirectInboundPort = dnsPort, outPort, inPort
	if got, err := Backend(ctx, c); err != nil || got != "nft" {
		t.Errorf("Backend(auto) = %q, %v; want nft, which holds Docker's DNAT", got, err)
	}
	var logs strings.Builder
	if err := Install(ctx, c, testLoggerTo(t, &logs)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "the other iptables backend holds nat rules too") || !strings.Contains(logs.String(), "MASQUERADE") {
		t.Errorf("install did not warn about legacy's nat rule:\n%s", logs.String())
	}
	out, err := n.exec(testAppUID, "dig", "+short", "+time=2", "+tries=1", "@127.0.0.11", "httpbin.mesh", "A")
	if err != nil || out != "240.0.0.1" {
		t.Errorf("app dig @127.0.0.11 = %q, %v; want our resolver's 240.0.0.1", out, err)
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
