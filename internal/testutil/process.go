package testutil

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// Process is a binary an end-to-end test runs, its output (stdout and stderr) in Logs.
type Process struct {
	Name   string
	Cmd    *exec.Cmd
	Logs   *LockedBuffer
	exited chan struct{}
	err    error
}

// StartProcess starts cmd as name. When the test ends, a process still running is killed,
// and the logs of a failed test are printed.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Name: name, Cmd: cmd, Logs: &LockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Logs, p.Logs
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second // a child (Envoy) holding the log pipe must not hang Wait
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.Logs)
		}
	})
	return p
}

// Start starts bin with args as name (StartProcess).
func Start(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	return StartProcess(t, name, exec.Command(bin, args...))
}

// Count is how many times re matches the process's logs so far.
func (p *Process) Count(re string) int {
	return len(regexp.MustCompile(re).FindAllString(p.Logs.String(), -1))
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (Cmd.Wait's error); read it once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Kill stops the process at once (SIGKILL, after a SIGCONT: a stopped process dies only once
// continued) and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// ReadyJSON waits for the JSON file the process writes once ready and decodes it into v,
// failing the test when the process exits first or within passes.
func (p *Process) ReadyJSON(t testing.TB, path string, v any, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, v) == nil {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before ready (%v):\n%s", p.Name, p.err, p.Logs)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v:\n%s", p.Name, within, p.Logs)
		}
	}
}
