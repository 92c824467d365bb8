package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A process that writes its ready file is read back; its logs are captured; Kill ends it.
func TestProcessReadyAndKill(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	p := StartProcess(t, "sleeper", exec.Command("sh", "-c", `echo starting; echo '{"port": 4242}' > "$0"; exec sleep 60`, ready))
	var got struct{ Port int }
	p.ReadyJSON(t, ready, &got, 10*time.Second)
	if got.Port != 4242 {
		t.Fatalf("ready file read as %+v", got)
	}
	WaitFor(t, "the process's output in its logs", 10*time.Second, func() bool { return strings.Contains(p.Logs.String(), "starting") })
	p.Kill()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("exit after Kill: %v", err)
	}
}

// A process that exits without writing its ready file fails ReadyJSON with its exit and logs.
func TestProcessExitBeforeReady(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	ft := &fatalRecorder{TB: t}
	p := StartProcess(t, "quitter", exec.Command("sh", "-c", "echo bad flag; exit 3"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ReadyJSON(ft, filepath.Join(t.TempDir(), "never.json"), new(any), 10*time.Second)
	}()
	<-done
	if !strings.Contains(ft.msg, "quitter exited before ready (exit status 3)") || !strings.Contains(ft.msg, "bad flag") {
		t.Fatalf("ReadyJSON's failure = %q", ft.msg)
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "vo.yaml")
	WriteFile(t, path, VirtualOutbound("other", "{{service}}.mesh"))
	WriteFile(t, path, VirtualOutbound("default", "{{version}}.{{service}}.mesh"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.Contains(got, "mesh: default\n") || !strings.Contains(got, `host: "{{version}}.{{service}}.mesh"`) {
		t.Fatalf("file holds:\n%s", got)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*~")); len(m) > 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// fatalRecorder records a Fatalf and ends the goroutine calling it, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Start runs a binary with its arguments; Count counts a pattern's matches in its logs.
func TestStartAndCount(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p := Start(t, "echoer", sh, "-c", `echo "retry in=1"; echo "retry in=2"; echo done`)
	<-p.Exited()
	if err := p.Err(); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.Logs)
	}
	if n := p.Count(`retry in=\d`); n != 2 {
		t.Errorf("Count: %d, want 2:\n%s", n, p.Logs)
	}
}
