package agent

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DieWithGoRun makes the agent receive SIGTERM when its parent dies, when that parent is
// `go run`: `kill $!` after `go run ./cmd/kuma-dp run ... &` kills only `go run`, and the
// orphaned agent would keep its ports (the next start then fails with "address already in
// use"). Under any other parent (a container runtime, systemd, a shell) nothing changes. It
// reports whether it applied.
func DieWithGoRun() bool {
	ppid := os.Getppid()
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return false
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return false
	}
	if os.Getppid() != ppid { // the parent died before the request took effect
		_ = unix.Kill(os.Getpid(), unix.SIGTERM)
	}
	return true
}
