package agent

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// goRunParent is the pid of the `go run` parent DieWithGoRun attached to (0: none).
var goRunParent atomic.Int64

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
	goRunParent.Store(int64(ppid))
	if os.Getppid() != ppid { // the parent died before the request took effect
		_ = unix.Kill(os.Getpid(), unix.SIGTERM)
	}
	return true
}

// parentDeathEcho says whether a SIGTERM after the first is the echo of the go run parent's
// death, not an operator's second signal: the parent-death signal is sent each time the
// parent thread the agent hangs from exits, and a dying multi-threaded `go run` exits thread
// after thread, so one `kill` of go run delivers several SIGTERMs at once (which used to
// skip Envoy's drain as "second signal: stopping now"); the parent may still be exiting
// when they arrive. A SIGTERM a second or more after the first, a second SIGINT (Ctrl-C),
// or any signal under another parent still stops at once.
func parentDeathEcho(s os.Signal, sinceFirst time.Duration) bool {
	return goRunParent.Load() != 0 && s == syscall.SIGTERM && sinceFirst < time.Second
}
