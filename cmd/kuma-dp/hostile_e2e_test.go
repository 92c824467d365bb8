package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The hostile policy files of the adversarial campaign, run through the binary as a user
// runs it: `kuma-dp vips` and `kuma-dp run` refuse them naming the field (run serves the
// other files), never crash, and never print the offending value whole (a 16 MB log line
// once) nor a secret at all.

// boundedRun runs bin with args under a 4 GiB address-space limit, so that an unbounded
// render fails the test instead of taking the machine's memory.
func boundedRun(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -v 4194304; exec "$@"`, "sh", bin}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	done := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill(); close(done) })
	out, err := cmd.CombinedOutput()
	if !timer.Stop() {
		<-done
		t.Fatalf("%v: still running after 30s:\n%.2000s", args, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// checkRefusal: the output names the field, no line about it is long, and what must not show
// does not.
func checkRefusal(t *testing.T, what, out, field string, never ...string) {
	t.Helper()
	if !strings.Contains(out, field) {
		t.Errorf("%s: the output does not name %s:\n%.3000s", what, field, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, field) && len(line) > 2048 {
			t.Errorf("%s: a %d-byte line: a refused value is never shown whole:\n%.400s...", what, len(line), line)
		}
	}
	for _, s := range never {
		if strings.Contains(out, s) {
			t.Errorf("%s: the output carries %.60q...:\n%.3000s", what, s, out)
		}
	}
}

func TestE2EHostilePoliciesRefusedByVIPsAndRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, field, never string
	}{
		// The template's end shows only if the value is shown whole (quotes are escaped in logs).
		{"template memory bomb", testutil.BombPolicy(), "conf.host", testutil.BombTail},
		{"PEM private key where base64 is expected", testutil.PEMKeyPolicy(), "clientKey", testutil.SecretMarker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dpFile, policies := meshDir(t)
			writeFile(t, filepath.Join(policies, "hostile.yaml"), tc.body)

			code, out := boundedRun(t, kumaDP(t), "vips", "--dataplane-file", dpFile, "--policies-dir", policies)
			if code != exitInvalid {
				t.Fatalf("vips: exit %d, want %d:\n%.3000s", code, exitInvalid, out)
			}
			checkRefusal(t, "vips", out, tc.field, tc.never)

			// The agent starts without the file (one bad file in a directory every agent
			// reads must not keep them all from starting), and says why.
			p := startAgent(t, dpFile, policies)
			if ips, _ := p.query("v1.httpbin.mesh", 1); len(ips) != 1 {
				t.Fatalf("v1.httpbin.mesh = %v: the other files must be served", ips)
			}
			logs := p.Logs.String()
			if !strings.Contains(logs, "file refused; left out of the model") {
				t.Errorf("run: the refusal is not logged as a file left out:\n%.3000s", logs)
			}
			checkRefusal(t, "run", logs, tc.field, tc.never)
		})
	}
}

// A running agent given the hostile files keeps serving its last good model, and says why
// without echoing them.
func TestE2EHostilePoliciesKeepTheLastGood(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies)
	if ips, _ := p.query("v1.httpbin.mesh", 1); len(ips) != 1 {
		t.Fatalf("v1.httpbin.mesh = %v before the hostile files", ips)
	}
	writeFile(t, filepath.Join(policies, "bomb.yaml"), testutil.BombPolicy())
	writeFile(t, filepath.Join(policies, "leak.yaml"), testutil.PEMKeyPolicy())
	waitFor(t, "both refusals logged", 10*time.Second, func() bool {
		l := p.Logs.String()
		return strings.Contains(l, "bomb.yaml") && strings.Contains(l, "leak.yaml")
	})
	if ips, _ := p.query("v1.httpbin.mesh", 1); len(ips) != 1 {
		t.Fatalf("v1.httpbin.mesh = %v after the hostile files: the last good model must keep serving", ips)
	}
	logs := p.Logs.String()
	checkRefusal(t, "run (reload)", logs, "conf.host", testutil.BombTail, testutil.SecretMarker)
	checkRefusal(t, "run (reload)", logs, "clientKey")
}

var loadStarted = regexp.MustCompile(`msg="loading the model".* trigger=watch`)

// SIGTERM during a long reload (a 20 MB policy file, 120,000 dataplanes) stops the agent
// without waiting for the load: the load is cancelled, never applied, and the agent exits 0.
func TestE2ESIGTERMCancelsALongReload(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies)
	var b strings.Builder
	for i := range 120000 {
		fmt.Fprintf(&b, "---\ntype: Dataplane\nmesh: default\nname: big-%d\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n"+
			"  - port: 8080\n    tags:\n      kuma.io/service: big-%d\n      version: v%d\n", i, i>>16&255, i>>8&255, i&255, i%500, i%7)
	}
	writeFile(t, filepath.Join(policies, "big.yaml"), b.String())
	waitFor(t, "the reload to start", 10*time.Second, func() bool {
		return loadStarted.MatchString(p.Logs.String())
	})
	time.Sleep(50 * time.Millisecond) // well inside a load of this size
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	logs := p.Logs.String()
	if strings.Contains(logs, "dataplanes=120002") {
		t.Fatalf("the reload ran to the end after SIGTERM:\n%.3000s", logs)
	}
	if !strings.Contains(logs, "msg=stopped") {
		t.Fatalf("no orderly stop:\n%.3000s", logs)
	}
}
