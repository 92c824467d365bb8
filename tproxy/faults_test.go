package tproxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// meaningful is saveAll's output without the tables that hold nothing (no rule, no chain of
// anyone's): iptables-legacy lists a table once its module is loaded, even when empty.
func meaningful(save string) string {
	var out, block strings.Builder
	content := false
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			block.Reset()
			content = false
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, ":") && strings.Contains(line, " - ["):
			content = true
		}
		block.WriteString(line + "\n")
		if line == "COMMIT" {
			if content {
				out.WriteString(block.String())
			}
			block.Reset()
		}
	}
	return out.String()
}

// faultConfig is an IPv4 install into n with its own state file.
func faultConfig(t *testing.T, n *testNS, b backend) Config {
	c := DefaultConfig()
	c.NetNS, c.Executables, c.IPFamilyMode = n.name, b.name, "ipv4"
	c.StateFile = filepath.Join(t.TempDir(), "state.json")
	return c
}

// Look-alikes of ours (a chain named with our prefix, a rule whose comment starts like
// ours, in tables we use and tables we never use) are someone else's: install and uninstall
// leave them exactly as they were.
func TestLookAlikesSurvive(t *testing.T) {
	for i, b := range []backend{{name: "legacy"}, {name: "nft"}} {
		t.Run(b.name, func(t *testing.T) {
			requireNetns(t, b.bin(IPv4, "restore"))
			n := newTestNS(t, 5+i)
			foreign := `*filter
:KUMA_MESH_FAKE_FOREIGN - [0:0]
-A INPUT -j KUMA_MESH_FAKE_FOREIGN
-A KUMA_MESH_FAKE_FOREIGN -p tcp -m tcp --dport 22 -j ACCEPT
COMMIT
*mangle
-A OUTPUT -p udp -m comment --comment "kuma-dp/but-not-ours" -j ACCEPT
COMMIT
*nat
:KUMA_MESH_OLD - [0:0]
-A OUTPUT -p udp -m udp --dport 5353 -j KUMA_MESH_OLD
-A OUTPUT -m comment --comment "kuma-dp/outbound-but-not-ours" -j ACCEPT
COMMIT
`
			cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
			cmd.Stdin = strings.NewReader(foreign)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("plant look-alikes: %v\n%s", err, out)
			}
			c := faultConfig(t, n, b)
			before := meaningful(n.saveAll(t, b))
			ctx := context.Background()
			if err := Install(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			installed := n.saveAll(t, b)
			for _, keep := range []string{"KUMA_MESH_FAKE_FOREIGN", "kuma-dp/but-not-ours", "KUMA_MESH_OLD", "kuma-dp/outbound-but-not-ours"} {
				if !strings.Contains(installed, keep) {
					t.Errorf("install removed the look-alike %s", keep)
				}
			}
			if err := Uninstall(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			if after := meaningful(n.saveAll(t, b)); after != before {
				t.Fatalf("uninstall did not leave the look-alikes exactly as they were:\n%s\nbefore:\n%q\nafter:\n%q",
					lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")), before, after)
			}
		})
	}
}

// Six installs at once give the rules of one: the lock makes read-compute-restore one
// step per install.
func TestParallelInstallsGiveOneCopy(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"))
	n := newTestNS(t, 7)
	c := faultConfig(t, n, b)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Install(context.Background(), c, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rs, err := buildRules(c, IPv4)
	if err != nil {
		t.Fatal(err)
	}
	save := mustRun(t, "ip", "netns", "exec", n.name, b.bin(IPv4, "save"))
	if got, want := countRules(parseOurs(save)), countRules(rs.tables); got != want {
		t.Fatalf("%d rules of ours after six parallel installs, want %d (one install)", got, want)
	}
	if err := Uninstall(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
}

// A state file that cannot be written: no VIP route is added (it could never be removed),
// and the error says so.
func TestUnrecordableRouteIsNotAdded(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"))
	n := newTestNS(t, 8)
	installUnrecordable(t, n, faultConfig(t, n, b), "cannot record")
}

// The same for ::6 on lo, in a namespace whose default routes cover the VIP ranges (so
// no route is wanted and the address is the first thing to record).
func TestUnrecordablePassthroughAddressIsNotAdded(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
	n := newTestNS(t, 30)
	mustRun(t, "ip", "netns", "exec", n.name, "ip", "route", "add", "default", "via", n.host4.String())
	mustRun(t, "ip", "netns", "exec", n.name, "ip", "-6", "route", "add", "default", "via", n.host6.String())
	installUnrecordable(t, n, faultConfig(t, n, b), "cannot record the address ::6/128")
}

// installUnrecordable installs c in dual-stack mode with its state file on a read-only file
// system: the install fails with an error holding want, and no route or address was added.
func installUnrecordable(t *testing.T, n *testNS, c Config, want string) {
	t.Helper()
	c.IPFamilyMode = "dualstack"
	c.StateFile = filepath.Join(readOnlyDir(t), "state.json")
	before := n.netState(t)
	err := Install(context.Background(), c, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Install with an unwritable state file: %v", err)
	}
	if after := n.netState(t); after != before {
		t.Fatalf("routes or addresses added without a record:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	c.StateFile = filepath.Join(t.TempDir(), "state.json")
	if err := Uninstall(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
}

// readOnlyDir is a directory on a read-only file system (a tmpfs mounted ro).
func readOnlyDir(t *testing.T) string {
	ro := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", ro).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a read-only tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
	return ro
}

// ::6 already on lo was put there by someone else: install uses it without recording it as
// ours, and uninstall leaves it.
func TestForeignPassthroughAddressKept(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
	n := newTestNS(t, 29)
	c := faultConfig(t, n, b)
	c.IPFamilyMode = "dualstack"
	mustRun(t, "ip", "netns", "exec", n.name, "ip", "-6", "addr", "add", "::6/128", "dev", "lo")
	if err := Install(context.Background(), c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	st, err := loadState(statePath(c))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Addresses) != 0 {
		t.Errorf("the state file records %v as ours", st.Addresses)
	}
	if err := Uninstall(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	if lo := n.netState(t); !strings.Contains(lo, "inet6 ::6/128") {
		t.Fatalf("uninstall removed the ::6 it had not added:\n%s", lo)
	}
}

// iptables-restore commits table by table: when a later table fails, the earlier ones are
// live. Install rolls them back and says nothing changed. The failure is real iptables with
// the nat table refused: a wrapper first in PATH hands the real iptables-restore every table
// but nat, then fails.
func TestFailedTableIsRolledBack(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"))
	n := newTestNS(t, 9)
	c := faultConfig(t, n, b)
	failNATRestore(t, b, IPv4, "iptables-restore: line 42 failed (simulated)")

	before := meaningful(n.saveAll(t, b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Install(ctx, c, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "rolled back: nothing of ipv4 is changed") {
		t.Fatalf("Install with the nat table failing: %v", err)
	}
	if after := meaningful(n.saveAll(t, b)); after != before {
		t.Fatalf("rules left live after the failed install:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
	}
}

// A kernel without IPv6 NAT (no ip6table_nat module, which a container cannot load) while
// the namespace has IPv6 addresses: the IPv6 rules cannot go in, so IPv6 traffic could not
// be redirected. Install fails, says how to install IPv4 only on purpose, and leaves
// nothing behind - before, the IPv4 rules stayed live beside the failed IPv6 install.
func TestNoIPv6NATChangesNothing(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
	n := newTestNS(t, 19)
	c := faultConfig(t, n, b)
	c.IPFamilyMode = "dualstack"
	// What ip6tables-legacy-restore says without ip6table_nat, after committing the tables
	// before nat.
	failNATRestore(t, b, IPv6, "ip6tables-restore v1.8.9 (legacy): can't initialize ip6tables table `nat': Table does not exist (do you need to insmod?)")
	before := meaningful(n.saveAll(t, b))
	beforeNet := n.netState(t)
	err := Install(context.Background(), c, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "--ip-family-mode ipv4") {
		t.Fatalf("Install without IPv6 NAT: %v; want an error pointing at --ip-family-mode ipv4", err)
	}
	if after := meaningful(n.saveAll(t, b)); after != before {
		t.Fatalf("rules left live after the failed install:\n%s", lineDiff(strings.Split(before, "\n"), strings.Split(after, "\n")))
	}
	if afterNet := n.netState(t); afterNet != beforeNet {
		t.Fatalf("routes or addresses changed by the failed install:\nbefore:\n%s\nafter:\n%s", beforeNet, afterNet)
	}
}

// Two namespaces installed with --netns and the same (default) --state-file, as a CNI
// installing pod after pod would: each one's routes and addresses are its own to remove.
// The file held the last install's only: uninstalling the first namespace deleted what its
// record named, the second kept its route and ::6 for good.
func TestStateFilePerNamespace(t *testing.T) {
	b := backend{name: "legacy"}
	requireNetns(t, b.bin(IPv4, "restore"), b.bin(IPv6, "restore"))
	a, z := newTestNS(t, 24), newTestNS(t, 25)
	state := filepath.Join(t.TempDir(), "tproxy-state.json")
	ctx := context.Background()
	before := map[*testNS]string{a: a.netState(t), z: z.netState(t)}
	for _, n := range []*testNS{a, z} {
		c := faultConfig(t, n, b)
		c.IPFamilyMode, c.StateFile = "dualstack", state
		if err := Install(ctx, c, testLogger(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*testNS{a, z} {
		c := faultConfig(t, n, b)
		c.IPFamilyMode, c.StateFile = "dualstack", state
		if err := Uninstall(ctx, c, testLogger(t)); err != nil {
			t.Fatal(err)
		}
		if after := n.netState(t); after != before[n] {
			t.Errorf("%s: routes or addresses left after uninstall:\nbefore:\n%s\nafter:\n%s", n.name, before[n], after)
		}
	}
}

// A namespace whose loopback is down (a fresh `ip netns add`, before anyone set lo up):
// every redirected connection goes to the loopback and is unreachable. Install says so (the
// CLI's verify lists lo as down among the interfaces).
func TestLoopbackDownIsReported(t *testing.T) {
	b := backend{name: "nft"}
	requireNetns(t, b.bin(IPv4, "restore"))
	n := newTestNS(t, 28)
	mustRun(t, "ip", "-n", n.name, "link", "set", "lo", "down")
	c := faultConfig(t, n, b)
	ctx := context.Background()
	var logs strings.Builder
	if err := Install(ctx, c, testLoggerTo(t, &logs)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "loopback is down") {
		t.Errorf("install did not warn that lo is down:\n%s", logs.String())
	}
	if err := Uninstall(ctx, c, nil); err != nil {
		t.Fatal(err)
	}
}

// failNATRestore puts first in PATH a wrapper of backend b's restore command for family f
// that hands the real one every table of its input but nat, then fails saying msg: a real
// iptables committing the tables before a failing one.
func failNATRestore(t *testing.T, b backend, f Family, msg string) {
	t.Helper()
	real, err := exec.LookPath(b.bin(f, "restore"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := fmt.Sprintf(`#!/bin/sh
in=$(cat)
case "$in" in
*'*nat'*)
	printf '%%s\n' "$in" | awk '/^\*nat/{skip=1} !skip{print} /^COMMIT/{skip=0}' | %s "$@" || exit 2
	printf '%%s\n' %s >&2
	exit 1 ;;
esac
printf '%%s\n' "$in" | exec %s "$@"
`, real, shellQuote(msg), real)
	if err := os.WriteFile(filepath.Join(dir, b.bin(f, "restore")), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

// shellQuote is s as one single-quoted shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
