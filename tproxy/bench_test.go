package tproxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// BenchmarkInstall measures installing the default rule set into an empty network namespace,
// per backend and family: our one `iptables-restore --noflush` transaction against the peer,
// one `iptables` process per chain and rule (what go-iptables and older transparent proxies
// do). Processes are started from a thread inside the namespace (no `ip netns exec`), as the
// agent would run them. Each iteration's removal is untimed.
//
//	sudo go test ./tproxy -run '^$' -bench BenchmarkInstall -benchtime 20x
func BenchmarkInstall(b *testing.B) {
	for _, name := range []string{"legacy", "nft"} {
		for _, f := range []Family{IPv4, IPv6} {
			for _, mode := range []string{"restore", "per-rule"} {
				b.Run(name+"/"+f.String()+"/"+mode, func(b *testing.B) {
					benchInNetns(b, backend{name: name}, f, mode)
				})
			}
		}
	}
}

// benchInNetns must run on the goroutine that loops (b.Run starts a new one): it moves that
// goroutine's thread into a fresh namespace and checks it is there before anything runs.
func benchInNetns(b *testing.B, bk backend, f Family, mode string) {
	if _, err := exec.LookPath(bk.bin(f, "restore")); err != nil {
		b.Skipf("%s not found", bk.bin(f, "restore"))
	}
	requireRootTB(b)
	name := fmt.Sprintf("kdp-bench-%d", os.Getpid()%100000)
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v %s", err, out)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", name).Run() }()

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	target, err := netns.GetFromName(name)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else: leave the thread locked, the runtime discards it
		orig.Close()
		target.Close()
	}()
	if err := netns.Set(target); err != nil {
		b.Fatal(err)
	}
	if cur, err := netns.Get(); err != nil || !cur.Equal(target) || cur.Equal(orig) {
		b.Fatalf("not inside the benchmark namespace (%v): refusing to touch the host's rules", err)
	}

	ctx := context.Background()
	c := DefaultConfig()
	rules, err := Rules(c, f)
	if err != nil {
		b.Fatal(err)
	}
	rs, _ := buildRules(c, f)
	remove := func() {
		save, err := bk.save(ctx, c, f)
		if err != nil {
			b.Fatal(err)
		}
		if live := parseOurs(save); len(live) > 0 {
			if err := bk.restore(ctx, c, f, removeInput(live)); err != nil {
				b.Fatal(err)
			}
		}
	}
	cmds := perRuleCommands(rs)
	bin := strings.TrimSuffix(bk.bin(f, "restore"), "-restore") // iptables-nft, ip6tables-legacy
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if mode == "restore" {
			if err := bk.restore(ctx, c, f, rules); err != nil {
				b.Fatal(err)
			}
		} else {
			for _, args := range cmds {
				if out, err := exec.Command(bin, append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
					b.Fatalf("%s %v: %v %s", bin, args, err, out)
				}
			}
		}
		b.StopTimer()
		remove()
		b.StartTimer()
	}
	if mode == "restore" {
		b.ReportMetric(1, "processes")
	} else {
		b.ReportMetric(float64(len(cmds)), "processes")
	}
}

// perRuleCommands turns the rule set into one iptables invocation per chain and rule.
func perRuleCommands(rs ruleSet) [][]string {
	var out [][]string
	for _, t := range rs.tables {
		for _, ch := range t.chains {
			out = append(out, []string{"-t", t.name, "-N", ch})
		}
		for _, line := range strings.Split(restoreLines(t.rules), "\n") {
			if line == "" {
				continue
			}
			args := []string{"-t", t.name}
			for _, f := range strings.Fields(line) {
				args = append(args, strings.Trim(f, `"`))
			}
			out = append(out, args)
		}
	}
	return out
}

func restoreLines(rules []rule) string {
	var b strings.Builder
	writeRules(&b, rules)
	return b.String()
}

func requireRootTB(tb testing.TB) {
	tb.Helper()
	if !isRoot() {
		tb.Skip("needs root (network namespaces, iptables)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("ip not found (Debian package iproute2)")
	}
}
