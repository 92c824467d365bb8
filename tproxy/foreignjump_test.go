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
			err := Uninstall(ctx, c, testLogger(t))
			if err == nil || !strings.Contains(err.Error(), "chain "+chainDNS+" is emptied but not deleted") || !strings.Contains(err.Error(), "--dport 9999") {
				t.Fatalf("Uninstall with a foreign rule jumping to %s: %v; want the kept chain and the foreign rule named", chainDNS, err)
			}
			save := mustRun(t, "ip", "netns", "exec", n.name, b.bin(IPv4, "save"))
			if left := countRules(parseOurs(save)); left != 0 {
				t.Fatalf("%d rules of ours left after uninstall:\n%s", left, save)
			}
			if !strings.Contains(save, "--dport 9999 -j "+chainDNS) {
				t.Fatalf("the foreign rule was removed:\n%s", save)
			}
		})
	}
}
