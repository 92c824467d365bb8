package bootstrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeExec(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindEnvoy(t *testing.T) {
	dir := t.TempDir()
	explicit := writeExec(t, filepath.Join(dir, "opt", "my-envoy"), "")
	onPath := writeExec(t, filepath.Join(dir, "bin", "envoy"), "")
	beside := writeExec(t, filepath.Join(dir, "kuma", "envoy"), "")
	self := filepath.Join(dir, "kuma", "kuma-dp")
	notExec := filepath.Join(dir, "opt", "plain")
	os.WriteFile(notExec, nil, 0o644)
	cases := []struct {
		name, binary, path, self, want, err string
	}{
		{name: "binary path wins", binary: explicit, path: filepath.Dir(onPath), self: self, want: explicit},
		{name: "PATH next", path: "/nonexistent:" + filepath.Dir(onPath), self: self, want: onPath},
		{name: "beside kuma-dp last", path: "/nonexistent", self: self, want: beside},
		{name: "binary path missing", binary: filepath.Join(dir, "nope"), err: "--binary-path"},
		{name: "binary path not executable", binary: notExec, err: "not executable"},
		{name: "nowhere", path: "/nonexistent", self: filepath.Join(dir, "elsewhere", "kuma-dp"), err: "binary not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := findEnvoy(c.binary, c.path, c.self)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("findEnvoy = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestEnvoyVersion(t *testing.T) {
	dir := t.TempDir()
	good := writeExec(t, filepath.Join(dir, "envoy"), `[ "$1" = --version ] || exit 3
echo
echo "envoy  version: 6fcb7b0a5cb15d5b3b9b0f0dd0ab4c1e5b4fe2c3/1.34.1/Clean/RELEASE/BoringSSL"
`)
	if v, err := EnvoyVersion(good); err != nil || v != "1.34.1" {
		t.Fatalf("EnvoyVersion = %q, %v", v, err)
	}
	garbled := writeExec(t, filepath.Join(dir, "garbled"), "echo hello\n")
	if _, err := EnvoyVersion(garbled); err == nil || !strings.Contains(err.Error(), "hello") {
		t.Fatalf("garbled output: err = %v", err)
	}
	failing := writeExec(t, filepath.Join(dir, "failing"), "echo boom >&2; exit 1\n")
	if _, err := EnvoyVersion(failing); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing binary: err = %v", err)
	}
	for out, want := range map[string]string{
		"envoy  version: abc123/1.31.0-dev/Modified/DEBUG/BoringSSL-FIPS":       "1.31.0-dev",
		"envoy version: 0123456789abcdef/1.28.7/Distribution/RELEASE/BoringSSL": "1.28.7",
	} {
		if got, err := parseVersion([]byte(out)); err != nil || got != want {
			t.Errorf("parseVersion(%q) = %q, %v", out, got, err)
		}
	}
}

// A relative --binary-path was checked against the working directory but run by name: exec
// looks a slash-less name up on PATH (another envoy, or none). A relative PATH entry found a
// binary exec then refused (exec.ErrDot): such entries are not searched, as exec.LookPath.
func TestFindEnvoyRelative(t *testing.T) {
	dir := t.TempDir()
	writeExec(t, filepath.Join(dir, "envoy"), "echo 'envoy  version: abc/1.34.1/Clean/RELEASE/BoringSSL'\n")
	writeExec(t, filepath.Join(dir, "sub", "envoy"), "echo 'envoy  version: abc/1.33.0/Clean/RELEASE/BoringSSL'\n")
	t.Chdir(dir)
	t.Setenv("PATH", "/nonexistent")
	for _, c := range []struct{ binary, path, want string }{
		{"envoy", "/nonexistent", "1.34.1"},
		{"./sub/envoy", "/nonexistent", "1.33.0"},
	} {
		got, err := findEnvoy(c.binary, c.path, "")
		if err != nil {
			t.Fatalf("findEnvoy(%q, PATH=%q): %v", c.binary, c.path, err)
		}
		if !filepath.IsAbs(got) {
			t.Errorf("findEnvoy(%q, PATH=%q) = %q, want an absolute path", c.binary, c.path, got)
		}
		if v, err := EnvoyVersion(got); err != nil || v != c.want {
			t.Errorf("findEnvoy(%q, PATH=%q) = %q, which runs as %q, %v; want %s", c.binary, c.path, got, v, err, c.want)
		}
	}
	for _, path := range []string{".", "sub", ":"} {
		if got, err := findEnvoy("", path, ""); err == nil || !strings.Contains(err.Error(), "binary not found") {
			t.Errorf("findEnvoy with PATH=%q = %q, %v; want binary not found (relative entries are not searched)", path, got, err)
		}
	}
}

// Permission bits for others only (0o701 on a file we own): the x check passed and the
// start failed with "permission denied". Found to be not executable, by the flag's name.
func TestFindEnvoyNotExecutableByUs(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may execute any file with an x bit")
	}
	p := writeExec(t, filepath.Join(t.TempDir(), "envoy"), "")
	if err := os.Chmod(p, 0o601); err != nil {
		t.Fatal(err)
	}
	if _, err := findEnvoy(p, "", ""); err == nil || !strings.Contains(err.Error(), "--binary-path") || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("findEnvoy(mode 0601) err = %v, want --binary-path ... not executable", err)
	}
}
