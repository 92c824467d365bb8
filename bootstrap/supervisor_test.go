package bootstrap

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeEnvoy writes an `envoy` stand-in (no Envoy binary exists on these machines). Each start
// appends "<unix-nanos> <args...>" to dir/starts; on SIGTERM it appends "term" to dir/events.
// mode: "serve" runs until SIGTERM, "crash" exits 1 at once, "ignore-term" ignores SIGTERM.
func fakeEnvoy(t *testing.T, mode string) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	// Traps first, then the start line: once a test sees the start line, signals are handled.
	var body string
	switch mode {
	case "crash":
	case "serve":
		body = "trap 'echo term >> " + dir + "/events; exit 0' TERM\n"
	case "ignore-term":
		body = "trap 'echo term-ignored >> " + dir + "/events' TERM\n"
	}
	body += `echo "$(date +%s%N) $*" >> ` + dir + `/starts
echo $$ > ` + dir + `/pid
`
	if mode == "crash" {
		body += "echo 'critical: bad config' >&2; exit 1\n"
	} else {
		body += "while :; do sleep 0.02; done\n"
	}
	return writeExec(t, filepath.Join(dir, "envoy"), body), dir
}

func readLines(path string) []string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runSupervisor(t *testing.T, s *Supervisor) (cancel func() time.Duration) {
	t.Helper()
	if s.Stdout == nil {
		s.Stdout, s.Stderr = io.Discard, io.Discard // the fake's shell noise ("Terminated")
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once atomic.Bool
	cancel = func() time.Duration {
		if !once.CompareAndSwap(false, true) {
			return 0
		}
		start := time.Now()
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return")
		}
		return time.Since(start)
	}
	t.Cleanup(func() { cancel() })
	return cancel
}

func TestSupervisorArgsAndStop(t *testing.T) {
	bin, dir := fakeEnvoy(t, "serve")
	s := &Supervisor{Binary: bin, ConfigPath: "/work/bootstrap.json", DrainTime: 7 * time.Second, LogLevel: "debug", StopGrace: 5 * time.Second}
	cancel := runSupervisor(t, s)
	waitFor(t, "envoy to start", func() bool { return len(readLines(dir+"/starts")) == 1 && s.Live() })
	args := strings.SplitN(readLines(dir + "/starts")[0], " ", 2)[1]
	want := "--config-path /work/bootstrap.json --drain-time-s 7 --drain-strategy immediate --disable-hot-restart --log-level debug"
	if args != want {
		t.Errorf("args = %q\nwant   %q", args, want)
	}
	// Its own process group.
	pid := s.PID()
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("pgid of envoy = %d (%v), want its own pid %d", pgid, err, pid)
	}
	took := cancel()
	if got := readLines(dir + "/events"); len(got) != 1 || got[0] != "term" {
		t.Errorf("events = %v, want [term]: stop must send SIGTERM", got)
	}
	if took > 3*time.Second {
		t.Errorf("stop took %v for an Envoy that exits on SIGTERM", took)
	}
	if s.Live() || syscall.Kill(pid, 0) == nil {
		t.Error("envoy still alive after stop")
	}
}

func TestSupervisorKillsAfterGrace(t *testing.T) {
	bin, dir := fakeEnvoy(t, "ignore-term")
	s := &Supervisor{Binary: bin, ConfigPath: "/b.json", StopGrace: 300 * time.Millisecond}
	cancel := runSupervisor(t, s)
	waitFor(t, "envoy to start", func() bool { return s.Live() && len(readLines(dir+"/starts")) == 1 })
	pid := s.PID()
	took := cancel()
	if took < 300*time.Millisecond {
		t.Errorf("stopped after %v, before the grace period", took)
	}
	if got := readLines(dir + "/events"); len(got) == 0 || got[0] != "term-ignored" {
		t.Errorf("events = %v: SIGTERM was not sent first", got)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Error("envoy that ignores SIGTERM still alive: SIGKILL not sent")
	}
}

func TestSupervisorRestartsWithBackoff(t *testing.T) {
	bin, dir := fakeEnvoy(t, "crash")
	s := &Supervisor{Binary: bin, ConfigPath: "/b.json", InitialBackoff: 40 * time.Millisecond, MaxBackoff: 320 * time.Millisecond, Jitter: -1} // no jitter: the gaps are exact lower bounds
	cancel := runSupervisor(t, s)
	waitFor(t, "5 starts", func() bool { return len(readLines(dir+"/starts")) >= 5 })
	cancel()
	var at []int64
	for _, l := range readLines(dir + "/starts") {
		n, _ := strconv.ParseInt(strings.Fields(l)[0], 10, 64)
		at = append(at, n)
	}
	want := []time.Duration{40, 80, 160, 320}
	for i := 0; i+1 < len(at) && i < len(want); i++ {
		gap := time.Duration(at[i+1] - at[i])
		if gap < want[i]*time.Millisecond {
			t.Errorf("restart %d came after %v, want at least %v (exponential backoff)", i+1, gap, want[i]*time.Millisecond)
		}
	}
	if s.Restarts() < 4 {
		t.Errorf("Restarts() = %d", s.Restarts())
	}
}

func TestSupervisorLivenessDropsWhileDown(t *testing.T) {
	bin, dir := fakeEnvoy(t, "serve")
	s := &Supervisor{Binary: bin, ConfigPath: "/b.json", InitialBackoff: 500 * time.Millisecond, Jitter: -1}
	runSupervisor(t, s)
	waitFor(t, "envoy to start", func() bool { return s.Live() && len(readLines(dir+"/starts")) == 1 })
	first := s.PID()
	syscall.Kill(first, syscall.SIGKILL) // a crash
	waitFor(t, "liveness to drop", func() bool { return !s.Live() })
	waitFor(t, "the restart", func() bool { return s.Live() && s.PID() != first && len(readLines(dir+"/starts")) == 2 })
	if s.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", s.Restarts())
	}
}

func TestSupervisorStartFailure(t *testing.T) {
	s := &Supervisor{Binary: filepath.Join(t.TempDir(), "missing"), ConfigPath: "/b.json"}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("Run with a missing binary: %v", err)
	}
}

// TestDrain: a stand-in for Envoy's admin API on a real unix socket receives the
// POST /healthcheck/fail; Drain then waits the drain time.
func TestDrain(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "adm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/healthcheck/fail" {
			failed.Add(1)
			w.Write([]byte("OK\n"))
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(lis)
	defer srv.Close()

	s := &Supervisor{AdminSocket: sock, DrainTime: 200 * time.Millisecond}
	start := time.Now()
	if err := s.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if failed.Load() != 1 {
		t.Errorf("healthcheck/fail called %d times", failed.Load())
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("Drain returned after %v, before the drain time", took)
	}
	// A cancelled context cuts the wait short.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	s.DrainTime = time.Hour
	if err := s.Drain(ctx); err == nil {
		t.Error("Drain ignored its context")
	}
	// No admin API: a clear error.
	s.AdminSocket = filepath.Join(dir, "none.sock")
	if err := s.Drain(context.Background()); err == nil || !strings.Contains(err.Error(), "admin API") {
		t.Errorf("Drain without admin: %v", err)
	}
}

// Envoy's output going to a writer that is not a file goes through a pipe; a child left
// behind by the process (a wrapper script's helper) kept the pipe open, so Wait - and the
// supervisor - never saw the exit and Envoy was never restarted.
func TestSupervisorRestartsWhenAChildHoldsTheOutput(t *testing.T) {
	dir := t.TempDir()
	bin := writeExec(t, filepath.Join(dir, "envoy"), `echo start >> `+dir+`/starts
sleep 20 &
echo $! >> `+dir+`/children
echo 'critical: bad config' >&2
exit 1
`)
	t.Cleanup(func() {
		for _, pid := range readLines(filepath.Join(dir, "children")) {
			if n, err := strconv.Atoi(pid); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
	s := &Supervisor{Binary: bin, ConfigPath: "/b.json", Stdout: io.Discard, Stderr: io.Discard,
		InitialBackoff: 20 * time.Millisecond, Jitter: -1, StopGrace: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(readLines(filepath.Join(dir, "starts"))) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(readLines(filepath.Join(dir, "starts"))); n < 2 {
		t.Fatalf("envoy started %d time(s) in 5s; its exit went unnoticed while a child held its output pipe", n)
	}
}
