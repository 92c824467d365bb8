package tproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Install and Uninstall read the live rules, compute a change and restore it: two runs at
// once (a restarted init container beside a live agent, parallel installs) would both read
// the same state and both add their copy. A lock held across read-compute-restore makes
// them one after the other. It is our own lock file, not xtables' /run/xtables.lock:
// iptables-restore --wait takes that one itself, so holding it would block our own restore.
// One lock per network namespace (the file name carries it), in /run when writable.

// lockTimeout bounds the wait for another install or uninstall.
const lockTimeout = 30 * time.Second

func lockPath(c Config) string {
	name := "kuma-dp-tproxy.lock"
	if c.NetNS != "" {
		name = "kuma-dp-tproxy-" + c.NetNS + ".lock"
	}
	for _, dir := range []string{"/run", os.TempDir()} {
		if unix.Access(dir, unix.W_OK) == nil {
			return filepath.Join(dir, name)
		}
	}
	return filepath.Join(os.TempDir(), name)
}

// lock takes the transparent proxy's lock, waiting for another holder up to lockTimeout.
func lock(ctx context.Context, c Config) (unlock func(), err error) {
	path := lockPath(c)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("transparent proxy lock %s: %w", path, err)
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("transparent proxy lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("transparent proxy lock %s: another install or uninstall has held it for %v", path, lockTimeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
