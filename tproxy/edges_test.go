package tproxy

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// Exclusions that iptables stores or prints in another form than the one written: "-d
// 0.0.0.0/0" is no match at all (iptables-save prints nothing), glibc prints ::a00:1 as
// ::10.0.0.1, the owner range 7-7 as 7. The live rules must still compare equal to the
// expected ones, or every install reconciles again and Verify never passes. The
// multiport range 80-80 must become port 80 (iptables refuses 80:80).
func TestExclusionEdgesAreIdempotent(t *testing.T) {
	for i, b := range []backend{{name: "legacy"}, {name: "nft"}} {
		t.Run(b.name, func(t *testing.T) {
			requireNetns(t, b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
			n := newTestNS(t, 12+i)
			c := faultConfig(t, n, b)
			c.IPFamilyMode = "dualstack"
			c.ExcludeOutboundIPs = []netip.Prefix{
				netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
				netip.MustParsePrefix("::10.0.0.1/128"), netip.MustParsePrefix("::ffff:0:0:0/96"),
			}
			c.ExcludeOutboundPortsForUIDs = []string{"tcp:80-80,90:7-7", "udp:53:1000-1000"}
			ctx := context.Background()
			if err := Install(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			if d, err := Verify(ctx, c); err != nil || strings.Contains(d, "nat:") || strings.Contains(d, "raw:") {
				t.Fatalf("Verify right after Install = %q, %v; want no rule difference", d, err)
			}
			before := n.saveAll(t, b)
			var logs strings.Builder
			if err := Install(ctx, c, testLoggerTo(t, &logs)); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(logs.String(), "reconciling") {
				t.Errorf("second install reconciled again:\n%s", logs.String())
			}
			if after := n.saveAll(t, b); after != before {
				t.Errorf("second install changed the rules:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
			}
			if err := Uninstall(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			if left := parseOurs(n.saveAll(t, b)); len(left) != 0 {
				t.Fatalf("left after uninstall: %v", view(left))
			}
		})
	}
}
