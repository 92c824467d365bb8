package tproxy

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// A chain named exactly like one of ours, which a rule not ours jumps to (the adversarial
// campaign's "foreign chain named like ours"): install takes the chain over, and uninstall
// still removes every rule of ours. The kernel refuses to delete a chain in use, which used
// to fail the whole nat transaction and leave all 16 of its rules live; now that one chain
// is emptied and kept, the error names it and the foreign rule, and the foreign rule stays.
func TestForeignJumpToOurChainUninstalls(t *testing.T) {
	for i, b := range []backend{{name: "legacy"}, {name: "nft"}} {
		t.Run(b.name, func(t *testing.T) {
			requireNetns(t, b.bin(IPv4, "restore"))
			n := newTestNS(t, 10+i)
			foreign := "*nat\n:" + chainDNS + " - [0:0]\n-A OUTPUT -p tcp -m tcp --dport 9999 -j " + chainDNS + "\nCOMMIT\n"
			cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
			cmd.Stdin = strings.NewReader(foreign)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("plant the foreign jump: %v\n%s", err, out)
			}
			c := faultConfig(t, n, b)
			ctx := context.Background()
			if err := Install(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			// Reconciling to a config without DNS deletes the DNS chain, which the kernel
			// refuses while the foreign rule jumps to it: it used to fail the whole nat
			// transaction. The chain is emptied and kept instead.
			noDNS := c
			noDNS.RedirectDNS = false
			if err := Install(ctx, noDNS, testLogger(t)); err != nil {
				t.Fatalf("Install without DNS over a DNS chain a foreign rule jumps to: %v", err)
			}
			save := mustRun(t, "ip", "netns", "exec", n.name, b.bin(IPv4, "save"))
			if strings.Contains(save, "kuma-dp/dns") || !strings.Contains(save, "--dport 9999 -j "+chainDNS) {
				t.Fatalf("after the install without DNS, want no DNS rule of ours and the foreign rule:\n%s", save)
			}
			if d, err := Verify(ctx, noDNS); err != nil || strings.Contains(d, "- ") {
				t.Fatalf("Verify(no DNS) = %q, %v; want nothing missing", d, err)
			}
			if err := Install(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			// The dry run prints what uninstall runs: the chain is emptied, not deleted.
			if plan, err := RemovalRules(ctx, c); err != nil || !strings.Contains(plan, "-F "+chainDNS+"\n") || strings.Contains(plan, "-X "+chainDNS+"\n") {
				t.Errorf("RemovalRules = %q, %v; want %s flushed and kept", plan, err, chainDNS)
			}
			err := Uninstall(ctx, c, testLogger(t))
			if err == nil || !strings.Contains(err.Error(), "chain "+chainDNS+" is emptied but not deleted") || !strings.Contains(err.Error(), "--dport 9999") {
				t.Fatalf("Uninstall with a foreign rule jumping to %s: %v; want the kept chain and the foreign rule named", chainDNS, err)
			}
			save = mustRun(t, "ip", "netns", "exec", n.name, b.bin(IPv4, "save"))
			if left := countRules(parseOurs(save)); left != 0 {
				t.Fatalf("%d rules of ours left after uninstall:\n%s", left, save)
			}
			if !strings.Contains(save, "--dport 9999 -j "+chainDNS) {
				t.Fatalf("the foreign rule was removed:\n%s", save)
			}
		})
	}
}

// kumactlRules is what Kuma's own `kumactl install transparent-proxy` leaves in nat (its
// golden files, with DNS redirection): the chain names we use, with rules of its own.
const kumactlRules = `*nat
:KUMA_MESH_INBOUND - [0:0]
:KUMA_MESH_INBOUND_REDIRECT - [0:0]
:KUMA_MESH_OUTBOUND - [0:0]
:KUMA_MESH_OUTBOUND_REDIRECT - [0:0]
-A PREROUTING -p tcp -j KUMA_MESH_INBOUND
-A OUTPUT -p udp -m udp --dport 53 -m owner --uid-owner 5678 -j RETURN
-A OUTPUT -p udp -m udp --dport 53 -j REDIRECT --to-ports 15053
-A OUTPUT -p tcp -j KUMA_MESH_OUTBOUND
-A KUMA_MESH_INBOUND -p tcp -m tcp --dport 22 -j RETURN
-A KUMA_MESH_INBOUND -p tcp -j KUMA_MESH_INBOUND_REDIRECT
-A KUMA_MESH_INBOUND_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A KUMA_MESH_OUTBOUND -s 127.0.0.6/32 -o lo -j RETURN
-A KUMA_MESH_OUTBOUND ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 53 -m owner --uid-owner 5678 -j KUMA_MESH_INBOUND_REDIRECT
-A KUMA_MESH_OUTBOUND -o lo -p tcp -m tcp ! --dport 53 -m owner ! --uid-owner 5678 -j RETURN
-A KUMA_MESH_OUTBOUND -m owner --uid-owner 5678 -j RETURN
-A KUMA_MESH_OUTBOUND -p tcp -m tcp --dport 53 -j REDIRECT --to-ports 15053
-A KUMA_MESH_OUTBOUND -d 127.0.0.1/32 -j RETURN
-A KUMA_MESH_OUTBOUND -j KUMA_MESH_OUTBOUND_REDIRECT
-A KUMA_MESH_OUTBOUND_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`

// A host where Kuma's kumactl installed its transparent proxy: its chains have our names
// but hold its rules. Install used to take them over (flushing 11 of kumactl's rules, which
// uninstall could never give back) and uninstall alone emptied them. Now install refuses,
// naming the chain and a rule of the other installer, and changes nothing; uninstall leaves
// them as they are.
func TestKumactlChainsAreNotTakenOver(t *testing.T) {
	for i, b := range []backend{{name: "legacy"}, {name: "nft"}} {
		t.Run(b.name, func(t *testing.T) {
			requireNetns(t, b.bin(IPv4, "restore"))
			n := newTestNS(t, 14+i)
			cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
			cmd.Stdin = strings.NewReader(kumactlRules)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("plant kumactl's rules: %v\n%s", err, out)
			}
			c := faultConfig(t, n, b)
			ctx := context.Background()
			before := meaningful(n.saveAll(t, b))
			err := Install(ctx, c, testLogger(t))
			if err == nil || !strings.Contains(err.Error(), "chain KUMA_MESH_") || !strings.Contains(err.Error(), "kumactl uninstall transparent-proxy") {
				t.Errorf("Install over kumactl's chains: %v; want a refusal naming the chain and kumactl", err)
			}
			if after := meaningful(n.saveAll(t, b)); after != before {
				t.Fatalf("Install changed kumactl's rules:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
			}
			if err := Uninstall(ctx, c, testLogger(t)); err != nil {
				t.Errorf("Uninstall with nothing of ours: %v", err)
			}
			if after := meaningful(n.saveAll(t, b)); after != before {
				t.Fatalf("Uninstall changed kumactl's rules:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
			}
		})
	}
}
