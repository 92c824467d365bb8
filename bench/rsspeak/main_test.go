package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestField(t *testing.T) {
	status := []byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t   512 kB\nRssFile:\t 512 kB\n")
	for name, want := range map[string]uint64{"VmRSS:": 1024, "RssAnon:": 512, "VmHWM:": 2048, "VmSwap:": 0} {
		if got := field(status, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// holder starts this test binary holding mib MiB it wrote (and, with child, a child of its
// own holding 16 MiB) and returns once it says so.
func holder(t *testing.T, mib int, child bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSampleSumsTheTree$")
	cmd.Env = append(os.Environ(), "RSSPEAK_HOLD_MIB="+strconv.Itoa(mib), "RSSPEAK_CHILD="+strconv.FormatBool(child))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with its parent
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "holding\n" {
		t.Fatalf("holder: %q, %v", line, err)
	}
	return cmd
}

// A process holding 32 MiB with a child holding 16: the sample sums both.
func TestSampleSumsTheTree(t *testing.T) {
	if v := os.Getenv("RSSPEAK_HOLD_MIB"); v != "" {
		mib, _ := strconv.Atoi(v)
		hold := make([]byte, mib<<20)
		for i := range hold {
			hold[i] = byte(i)
		}
		if os.Getenv("RSSPEAK_CHILD") == "true" {
			holder(t, 16, false)
		}
		os.Stdout.WriteString("holding\n")
		time.Sleep(time.Minute)
		runtime.KeepAlive(hold)
		return
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: rsspeak reads /proc/<pid>/status")
	}
	parent := holder(t, 32, true)
	rss, anon, ok := sample(parent.Process.Pid)
	if !ok {
		t.Fatal("the holder is gone")
	}
	if anon < 48<<10 {
		t.Fatalf("anonymous %d KiB, want at least the 48 MiB the holder and its child wrote", anon)
	}
	if rss < anon {
		t.Fatalf("RSS %d KiB below its anonymous part %d KiB", rss, anon)
	}
	if _, _, ok := sample(1 << 30); ok {
		t.Fatal("a process that does not exist was sampled")
	}
}
