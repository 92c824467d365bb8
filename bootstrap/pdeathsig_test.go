package bootstrap

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// When KUMA_DP_TEST_SUPERVISE is set, this test binary is the "kuma-dp" of
// TestEnvoyDiesWithKumaDP: it supervises the given fake envoy until it is killed.
func init() {
	bin := os.Getenv("KUMA_DP_TEST_SUPERVISE")
	if bin == "" {
		return
	}
	s := &Supervisor{Binary: bin, ConfigPath: "/b.json", Stdout: io.Discard, Stderr: io.Discard}
	_ = s.Run(context.Background())
	os.Exit(0)
}

// TestEnvoyDiesWithKumaDP: kuma-dp killed with SIGKILL (no chance to stop Envoy) still takes
// Envoy down, through Pdeathsig.
func TestEnvoyDiesWithKumaDP(t *testing.T) {
	bin, dir := fakeEnvoy(t, "ignore-term")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Env = append(os.Environ(), "KUMA_DP_TEST_SUPERVISE="+bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "the fake envoy to start", func() bool { return len(readLines(dir+"/pid")) == 1 })
	pid, err := strconv.Atoi(strings.TrimSpace(readLines(dir + "/pid")[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("envoy %d not running: %v", pid, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("envoy %d survived kuma-dp's SIGKILL: Pdeathsig not effective", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive: the process exists and is not a zombie waiting for its new parent to reap it.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
