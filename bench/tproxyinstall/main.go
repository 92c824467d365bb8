// Command tproxyinstall measures installing the transparent proxy's default rule set
// (tproxy.Rules) into an empty network namespace, per backend and family: our one
// `iptables-restore --noflush` transaction against the peer, one `iptables` process per
// chain and rule (what go-iptables and older transparent proxies do). Processes are started
// from a thread inside the namespace (no `ip netns exec`), as the agent would run them; each
// run gets a fresh namespace, made and removed outside the timing. Needs root (make
// bench-system runs it):
//
//	sudo go run ./bench/tproxyinstall [--runs 20]
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/vishvananda/netns"

	"github.com/kumadp/kuma-dp/tproxy"
)

func main() {
	runs := pflag.Int("runs", 20, "installs per backend, family and mode (the median is reported)")
	pflag.Parse()
	if os.Geteuid() != 0 {
		fmt.Println("tproxyinstall: skipped: needs root (network namespaces, iptables)")
		return
	}
	if _, err := exec.LookPath("ip"); err != nil {
		fmt.Println("tproxyinstall: skipped: ip not found (Debian package iproute2)")
		return
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("transparent proxy install, default rules, %d runs each; load average at start: %s\n", *runs,
		strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("%-28s %10s %26s\n", "", "processes", "ms: median (min-max)")
	c := tproxy.DefaultConfig()
	for _, backend := range []string{"legacy", "nft"} {
		for _, f := range []tproxy.Family{tproxy.IPv4, tproxy.IPv6} {
			rules, err := tproxy.Rules(c, f)
			if err != nil {
				fail(err)
			}
			bin := map[tproxy.Family]string{tproxy.IPv4: "iptables", tproxy.IPv6: "ip6tables"}[f] + "-" + backend
			if _, err := exec.LookPath(bin + "-restore"); err != nil {
				fmt.Printf("%-28s skipped: %s-restore not found\n", backend+"/"+f.String(), bin)
				continue
			}
			perRule := perRuleCommands(rules)
			modes := []struct {
				name      string
				processes int
				install   func() error
			}{
				{"restore", 1, func() error { return run(rules, bin+"-restore", "--noflush") }},
				{"per-rule", len(perRule), func() error {
					for _, args := range perRule {
						if err := run("", bin, append([]string{"-w"}, args...)...); err != nil {
							return err
						}
					}
					return nil
				}},
			}
			for _, m := range modes {
				var took []float64
				for i := 0; i < *runs; i++ {
					d, err := inFreshNetns(m.install)
					if err != nil {
						fail(fmt.Errorf("%s/%s/%s: %w", backend, f, m.name, err))
					}
					took = append(took, float64(d.Microseconds())/1000)
				}
				fmt.Printf("%-28s %10d %26s\n", backend+"/"+f.String()+"/"+m.name, m.processes, spread(took))
			}
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tproxyinstall:", err)
	os.Exit(1)
}

func run(stdin, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %v %s", name, args, err, out)
	}
	return nil
}

// inFreshNetns times install run from this goroutine's thread moved into a new network
// namespace; it refuses to run install anywhere else (the host's rules are never touched).
func inFreshNetns(install func() error) (time.Duration, error) {
	name := fmt.Sprintf("kdp-bench-%d", os.Getpid()%100000)
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ip netns add: %v %s", err, out)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", name).Run() }()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return 0, err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return 0, err
	}
	defer func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and the runtime discards it
	}()
	if cur, err := netns.Get(); err != nil || !cur.Equal(target) || cur.Equal(orig) {
		return 0, fmt.Errorf("not inside the benchmark namespace (%v): refusing to touch the host's rules", err)
	}
	start := time.Now()
	err = install()
	return time.Since(start), err
}

// perRuleCommands turns iptables-restore input into one iptables invocation per chain and
// rule.
func perRuleCommands(restore string) [][]string {
	var out [][]string
	table := ""
	for _, line := range strings.Split(restore, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			out = append(out, []string{"-t", table, "-N", strings.Fields(line[1:])[0]})
		case strings.HasPrefix(line, "-"):
			args := []string{"-t", table}
			for _, f := range strings.Fields(line) {
				args = append(args, strings.Trim(f, `"`))
			}
			out = append(out, args)
		}
	}
	return out
}

// spread is "median (min-max)".
func spread(xs []float64) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}
