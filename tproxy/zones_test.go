package tproxy

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A user whose DNS is excluded (--exclude-outbound-ports-for-uids udp:53:UID) asks the
// upstream itself, behind a stateful firewall (INPUT policy DROP, only replies and lo
// accepted, as on many VMs). Its query must live in the same conntrack zone as the answer:
// the zone split put the query in the applications' zone 2 and the answer (source port 53)
// in zone 1, so the answer matched no connection, was NEW, and the firewall dropped it.
func TestExcludedDNSUserBehindStatefulFirewall(t *testing.T) {
	b := backend{name: "nft"}
	requireNetns(t, "dig", b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newTestNS(t, 16)
	firewall := `*filter
:INPUT DROP [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`
	for _, f := range []Family{IPv4, IPv6} {
		cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(f, "restore"), "--noflush", "--wait=5")
		cmd.Stdin = strings.NewReader(firewall)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("plant the firewall: %v\n%s", err, out)
		}
	}
	n.upstream(t)
	dnsPort, outPort, inPort, _ := n.helper(t)
	const excluded = testAppUID + 1
	c := DefaultConfig()
	c.NetNS, c.Executables, c.StateFile = n.name, b.name, filepath.Join(t.TempDir(), "state.json")
	c.RedirectDNSPort, c.RedirectOutboundPort, c.RedirectInboundPort = dnsPort, outPort, inPort
	c.ExcludeOutboundPortsForUIDs = []string{"udp:53:1235"}
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	dig := []string{"+short", "+time=2", "+tries=1", "@" + n.host4.String(), "httpbin.mesh", "A"}
	for _, tc := range []struct {
		name string
		uid  int
		want string
	}{
		{"excluded user reaches the upstream", excluded, "192.0.2.7"},
		{"application redirected to the resolver", testAppUID, "240.0.0.1"},
		{"agent reaches the upstream", testAgentUID, "192.0.2.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := n.exec(tc.uid, "dig", dig...)
			if err != nil || out != tc.want {
				t.Fatalf("dig as %d = %q, %v; want %q", tc.uid, out, err, tc.want)
			}
		})
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
