package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFileName is the work dir's lock: held by the agent using it, with its PID inside.
const LockFileName = "kuma-dp.lock"

// workDir is the agent's work dir, locked for the agent's lifetime: two agents sharing one
// would both write the VIP state file (and Envoy's sockets) and silently undo each other.
type workDir struct {
	path    string
	created string // the topmost directory this start created ("" when it existed)
	lock    *os.File
}

// openWorkDir creates and locks the work dir: the configured one, or one per dataplane
// under the temporary directory (named from --mesh/--name, else from the dataplane file's
// path). A work dir locked by another agent is refused, naming it and the other PID.
func openWorkDir(cfg Config) (*workDir, error) {
	dir := cfg.Runtime.WorkDir
	if dir == "" {
		id := cfg.Dataplane.Name
		if id != "" && cfg.Dataplane.Mesh != "" {
			id = cfg.Dataplane.Mesh + "." + id
		}
		if id == "" {
			abs, _ := filepath.Abs(cfg.Runtime.DataplaneFile)
			sum := sha256.Sum256([]byte(abs))
			id = hex.EncodeToString(sum[:6])
		}
		dir = filepath.Join(os.TempDir(), "kuma-dp-"+id)
	}
	w := &workDir{path: dir, created: firstMissing(dir)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("work dir (--work-dir, dataplaneRuntime.workDir %q): %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		w.removeCreated()
		return nil, fmt.Errorf("work dir %q: lock: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("work dir %q is in use by another kuma-dp (pid %s): give each agent its own --work-dir (KUMA_DATAPLANE_RUNTIME_WORK_DIR)", dir, pid)
		}
		return nil, fmt.Errorf("work dir %q: lock: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	w.lock = f
	return w, nil
}

// firstMissing is the topmost directory of dir's path that does not exist yet ("" if dir exists).
func firstMissing(dir string) string {
	missing := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			return missing
		}
		missing = d
		if filepath.Dir(d) == d {
			return missing
		}
	}
}

// release unlocks the work dir (the lock file stays: removing it could race another start).
func (w *workDir) release() {
	if w != nil && w.lock != nil {
		_ = unix.Flock(int(w.lock.Fd()), unix.LOCK_UN)
		w.lock.Close()
		w.lock = nil
	}
}

// removeCreated removes what this start created, after a start that failed: nothing is
// left behind that was not there before.
func (w *workDir) removeCreated() {
	if w != nil && w.created != "" {
		_ = os.RemoveAll(w.created)
	}
}
