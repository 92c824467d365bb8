package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// TestE2ETransparentProxyInNetns runs `kuma-dp run --transparent-proxy
// --transparent-proxy-uninstall` in a fresh network namespace: the rules appear, an
// application's DNS query to port 53 is redirected to the agent and answered, and the
// rules are gone after SIGTERM. Needs root, ip(8), iptables and setpriv.
func TestE2ETransparentProxyInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	for _, bin := range []string{"ip", "iptables-save", "setpriv", "dig"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (scripts/test-deps.sh installs it)", bin)
		}
	}
	ns := fmt.Sprintf("kdp-run-%d", os.Getpid()%100000)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "set", "lo", "up")
	// 127.0.0.1:53: nothing listens there; only the redirection can answer.
	rules := func() string {
		out, _ := exec.Command("ip", "netns", "exec", ns, "iptables-save", "-t", "nat").CombinedOutput()
		return string(out)
	}

	dpFile, policies := meshDir(t)
	work := t.TempDir()
	readyFile := filepath.Join(work, "ready.json")
	// Inside the namespace nothing else listens: the resolver takes the port the rules
	// redirect DNS to.
	cmd := exec.Command("ip", "netns", "exec", ns, kumaDP(t), "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "15053", "--admin-address", "127.0.0.1:0", "--dns-upstream", "127.0.0.1:9",
		"--envoy=false", "--work-dir", work, "--ready-file", readyFile, "--drain-time", "100ms",
		"--transparent-proxy", "--transparent-proxy-uninstall")
	p := testutil.StartProcess(t, "agent", cmd)
	var ready any
	p.ReadyJSON(t, readyFile, &ready, 10*time.Second)
	if r := rules(); !strings.Contains(r, "kuma-dp/") || !strings.Contains(r, "15053") {
		t.Fatalf("no transparent proxy rules while running:\n%s", r)
	}
	// An application (not the agent's user) asks 127.0.0.1:53: the agent answers.
	out, err := exec.Command("ip", "netns", "exec", ns, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
		"dig", "+short", "+time=2", "+tries=1", "@127.0.0.1", "httpbin.mesh").CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "24") {
		t.Fatalf("redirected DNS query: %v\n%s", err, out)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit")
	}
	if r := rules(); strings.Contains(r, "kuma-dp/") {
		t.Fatalf("rules left after exit with --transparent-proxy-uninstall:\n%s", r)
	}
}
