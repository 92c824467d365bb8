package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// FindEnvoy returns the Envoy binary to run: binaryPath when given (it must be an executable
// file), else "envoy" on PATH, else "envoy" beside the kuma-dp executable.
func FindEnvoy(binaryPath string) (string, error) {
	self, _ := os.Executable()
	return findEnvoy(binaryPath, os.Getenv("PATH"), self)
}

func findEnvoy(binaryPath, pathEnv, self string) (string, error) {
	if binaryPath != "" {
		if err := executable(binaryPath); err != nil {
			return "", fmt.Errorf("envoy: --binary-path: %w", err)
		}
		// Absolute: exec looks a name without a slash up on PATH, and Envoy's restarts must
		// not depend on the working directory.
		abs, err := filepath.Abs(binaryPath)
		if err != nil {
			return "", fmt.Errorf("envoy: --binary-path: %w (value %q)", err, binaryPath)
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue // "" and relative entries name the working directory: not searched, as exec.LookPath refuses them
		}
		if p := filepath.Join(dir, "envoy"); executable(p) == nil {
			return p, nil
		}
	}
	beside := ""
	if self != "" {
		beside = filepath.Join(filepath.Dir(self), "envoy")
		if executable(beside) == nil {
			return beside, nil
		}
	}
	return "", fmt.Errorf("envoy: binary not found: not on PATH (%s) nor beside kuma-dp (%s); install Envoy or pass --binary-path", pathEnv, beside)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	// The kernel's answer for this user (a file with x for others only is not ours to run).
	if st.Mode().Perm()&0o111 == 0 || syscall.Access(p, 0x1 /* X_OK */) != nil {
		return fmt.Errorf("%s is not executable (mode %s)", p, st.Mode().Perm())
	}
	return nil
}

// `envoy --version` prints e.g.
// "envoy  version: 6fcb7b0a/1.31.2/Clean/RELEASE/BoringSSL".
var versionRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`version:\s*[0-9a-fA-F]+/([0-9]+\.[0-9]+\.[0-9]+[^/\s]*)/`)
})

// EnvoyVersion runs `path --version` and returns the release number (e.g. "1.31.2").
func EnvoyVersion(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("envoy: %s --version: %w (output %q)", path, err, bytes.TrimSpace(out))
	}
	return parseVersion(out)
}

func parseVersion(out []byte) (string, error) {
	m := versionRE().FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("envoy: cannot read a version in --version output %q", bytes.TrimSpace(out))
	}
	return string(m[1]), nil
}

// splitLoopback parses a loopback "ip:port" for the admin API.
func splitLoopback(addr string) (string, uint32, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("bootstrap: admin address: %w (value %q)", err, addr)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", 0, fmt.Errorf("bootstrap: admin address: must be a loopback IP, the admin API controls Envoy (value %q)", addr)
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil || port == 0 {
		return "", 0, errors.New("bootstrap: admin address: port must be 1-65535 (value " + strconv.Quote(addr) + ")")
	}
	return ip.String(), uint32(port), nil
}
