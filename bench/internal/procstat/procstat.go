// Package procstat reads what the system benchmarks report of a process from /proc (CPU
// time, resident memory), the machine's load average, and builds the binaries they run.
package procstat

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUTime is a process's user+system CPU time so far, from /proc/PID/stat (0 when gone).
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// Memory is a process's resident memory, in bytes, from /proc/PID/status.
type Memory struct {
	RSS, Anon, Peak int64 // VmRSS, RssAnon, VmHWM
}

// ReadMemory reads pid's Memory (zero when the process is gone).
func ReadMemory(pid int) Memory {
	var m Memory
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if !ok || len(fs) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = kb << 10
		case "RssAnon":
			m.Anon = kb << 10
		case "VmHWM":
			m.Peak = kb << 10
		}
	}
	return m
}

// LoadAvg is the 1, 5 and 15-minute load averages as /proc/loadavg gives them.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// Build builds a command of this module (e.g. ./cmd/kuma-cp) to out; run from the top of
// the clone.
func Build(pkg, out string) error {
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (run from the top of the clone): %v\n%s", pkg, err, b)
	}
	return nil
}

// KumaCP is the kuma-cp binary to measure: bin when given, else one built from this tree
// into dir.
func KumaCP(bin, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	out := filepath.Join(dir, "kuma-cp")
	return out, Build("./cmd/kuma-cp", out)
}
