package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// fakeGoRun is a parent process named "go" that is, like `go run`, a multi-threaded Go
// program: it starts its arguments from one of its threads and waits.
const fakeGoRun = `package main

import (
	"os"
	"os/exec"
	"runtime"
	"time"
)

func main() {
	for i := 0; i < 8; i++ {
		go func() { runtime.LockOSThread(); time.Sleep(time.Hour) }()
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if cmd.Start() != nil {
		os.Exit(1)
	}
	_ = cmd.Wait()
}
`

// One `kill` of go run is one signal to the agent: a dying multi-threaded parent sends the
// parent-death SIGTERM once per exiting thread, and those repeats used to be taken for an
// operator's second signal ("second signal: stopping now", which skips Envoy's drain). Five
// rounds, as the number of repeats varies with the order the parent's threads exit in.
func TestE2EGoRunKillIsOneSignal(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the go run stand-in")
	}
	dpFile, policies := meshDir(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "main.go"), []byte(fakeGoRun), 0o644)
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module fakego\n\ngo 1.22\n"), 0o644)
	parentBin := filepath.Join(dir, "go") // named go, as go run is
	build := exec.Command(goBin, "build", "-o", parentBin, ".")
	build.Dir, build.Env = src, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the go run stand-in: %v\n%s", err, out)
	}
	for round := 0; round < 5; round++ {
		work := filepath.Join(dir, "work")
		ready := filepath.Join(dir, "ready.json")
		os.Remove(ready)
		parent := testutil.Start(t, "go run stand-in", parentBin, kumaDP(t), "run", "--dataplane-file", dpFile, "--policies-dir", policies,
			"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
			"--dns-upstream", "127.0.0.1:9", "--envoy=false", "--work-dir", work, "--ready-file", ready)
		logs := parent.Logs
		var info struct {
			PID int `json:"pid"`
		}
		waitFor(t, "the agent ready", 15*time.Second, func() bool {
			b, err := os.ReadFile(ready)
			return err == nil && json.Unmarshal(b, &info) == nil && info.PID > 0
		})
		_ = parent.Cmd.Process.Signal(syscall.SIGTERM) // `kill $!` on go run
		<-parent.Exited()
		waitFor(t, "the agent gone with its parent", 5*time.Second, func() bool {
			return syscall.Kill(info.PID, 0) != nil
		})
		time.Sleep(50 * time.Millisecond) // its last lines
		out := logs.String()
		if !strings.Contains(out, "dies_with_go_run=true") || !strings.Contains(out, "signal received: graceful shutdown") {
			t.Fatalf("round %d: the agent did not start under go run or was not stopped by its signal:\n%s", round, out)
		}
		if strings.Contains(out, "second signal") {
			t.Fatalf("round %d: one kill of go run was taken for two signals:\n%s", round, out)
		}
	}
}
