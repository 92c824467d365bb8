package tproxy

import (
	"os/exec"
	"strings"
	"testing"
)

// A user whose DNS is excluded (--exclude-outbound-ports-for-uids udp:53:UID) asks the
// upstream itself, behind a stateful firewall (INPUT policy DROP, only replies and lo
// accepted, as on many VMs). Its query must live in the same conntrack zone as the answer:
// the zone split put the query in the applications' zone 2 and the answer (source port 53)
// in zone 1, so the answer matched no connection, was NEW, and the firewall dropped it.
func TestExcludedDNSUserBehindStatefulFirewall(t *testing.T) {
	b, n, ctx := nftNamespace(t, 16, "dig", backend{name: "nft"}.bin(IPv6, "restore"))
	firewall := `*filter
:INPUT DROP [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`
	// Docker's embedded resolver behind its DNAT (the helper serves it).
	docker := `*nat
:DOCKER_OUTPUT - [0:0]
:DOCKER_POSTROUTING - [0:0]
-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT
-A POSTROUTING -d 127.0.0.11/32 -j DOCKER_POSTROUTING
-A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:40000
-A DOCKER_POSTROUTING -s 127.0.0.11/32 -p udp -m udp --sport 40000 -j SNAT --to-source :53
COMMIT
`
	for f, in := range map[Family]string{IPv4: firewall + docker, IPv6: firewall} {
		cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(f, "restore"), "--noflush", "--wait=5")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("plant the firewall: %v\n%s", err, out)
		}
	}
	n.upstream(t)
	const excluded = testAppUID + 1
	c, _ := helperConfig(t, n, b)
	c.ExcludeOutboundPortsForUIDs = []string{"udp:53:1235"}
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		uid    int
		server string
		want   string
	}{
		{"excluded user reaches the upstream", excluded, n.host4.String(), "192.0.2.7"},
		{"excluded user reaches Docker's resolver", excluded, "127.0.0.11", dockerAnswer.String()},
		{"application redirected to the resolver", testAppUID, n.host4.String(), "240.0.0.1"},
		{"agent reaches the upstream", testAgentUID, n.host4.String(), "192.0.2.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := n.exec(tc.uid, "dig", "+short", "+time=2", "+tries=1", "@"+tc.server, "httpbin.mesh", "A")
			if err != nil || out != tc.want {
				t.Fatalf("dig as %d = %q, %v; want %q", tc.uid, out, err, tc.want)
			}
		})
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
