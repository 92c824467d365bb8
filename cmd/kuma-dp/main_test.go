package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/buildinfo"
)

// Every --help goes to standard output once, exits 0 and shows an example.
func TestHelpOnceOnStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"vips", "--help"}, {"tproxy", "--help"}, {"vips", "-h"}} {
		var stdout, stderr bytes.Buffer
		rc := dispatch(args, &stdout, &stderr)
		if rc != exitOK {
			t.Errorf("%v: exit %d, want 0", args, rc)
		}
		if stderr.Len() != 0 {
			t.Errorf("%v: help also written to stderr:\n%s", args, stderr.String())
		}
		out := stdout.String()
		if n := strings.Count(out, "Usage"); n != 1 {
			t.Errorf("%v: %d usage texts on stdout, want 1:\n%s", args, n, out)
		}
		if !strings.Contains(out, "Example") || !strings.Contains(out, "kuma-dp "+strings.TrimPrefix(args[0], "--help")) {
			t.Errorf("%v: no example of the command:\n%s", args, out)
		}
	}
}

// A bad flag: exit 2, the flag named, on stderr only.
func TestBadFlagNamed(t *testing.T) {
	for _, cmd := range []string{"run", "vips", "tproxy"} {
		var stdout, stderr bytes.Buffer
		if rc := dispatch([]string{cmd, "--no-such-flag"}, &stdout, &stderr); rc != exitUsage {
			t.Errorf("%s: exit %d, want %d", cmd, rc, exitUsage)
		}
		if !strings.Contains(stderr.String(), "--no-such-flag") || stdout.Len() != 0 {
			t.Errorf("%s: stderr %q stdout %q: want the flag named on stderr only", cmd, stderr.String(), stdout.String())
		}
	}
}

// The vips lines of the help examples run as written against the bundled mesh.
func TestHelpVIPsExamplesWork(t *testing.T) {
	var help bytes.Buffer
	dispatch([]string{"--help"}, &help, &help)
	dispatch([]string{"vips", "--help"}, &help, &help)
	t.Chdir("../..") // the examples name testdata/ from the repository's root
	ran := 0
	for _, line := range strings.Split(help.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "kuma-dp" || fields[1] != "vips" {
			continue
		}
		var stdout, stderr bytes.Buffer
		if rc := dispatch(fields[1:], &stdout, &stderr); rc != exitOK {
			t.Errorf("%s: exit %d: %s", line, rc, stderr.String())
		}
		if !strings.Contains(stdout.String(), "httpbin.mesh") && !strings.Contains(stdout.String(), "v1.backend.mesh") {
			t.Errorf("%s: output names neither httpbin.mesh nor v1.backend.mesh:\n%s", line, stdout.String())
		}
		ran++
	}
	if ran < 3 {
		t.Fatalf("ran %d vips examples, want at least 3 (top-level and vips --help)", ran)
	}
}

// The first-hour mistakes: each refused with exit 2 and a message that says what to write.
func TestUsageMistakesExplained(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--dataplane-fle", "dp.yaml"}, "unknown flag: --dataplane-fle (did you mean --dataplane-file?)"},
		{[]string{"vips", "--polices-dir", "x"}, "did you mean --policies-dir?"},
		{[]string{"run", "--envoy", "false", "--dataplane-file", "dp.yaml"}, "write --envoy=false"},
		{[]string{"version", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
	} {
		var stdout, stderr bytes.Buffer
		if rc := dispatch(tc.args, &stdout, &stderr); rc != exitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, rc, exitUsage)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
		}
	}
	// `kuma-dp help run` is run's help
	var help, direct, errb bytes.Buffer
	if rc := dispatch([]string{"help", "run"}, &help, &errb); rc != exitOK || help.Len() == 0 {
		t.Fatalf("help run: exit %d, %q", rc, errb.String())
	}
	dispatch([]string{"run", "--help"}, &direct, &errb)
	if help.String() != direct.String() {
		t.Error("kuma-dp help run differs from kuma-dp run --help")
	}
}

// The top-level dispatch: help, version and unknown commands, each with its exit code and
// its stream.
func TestDispatch(t *testing.T) {
	cases := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{nil, exitUsage, "", "Commands:"},
		{[]string{"help"}, exitOK, "Commands:", ""},
		{[]string{"help", "vips"}, exitOK, "kuma-dp vips --dataplane-file", ""},
		{[]string{"help", "nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"--version"}, exitOK, "kuma-dp " + buildinfo.Version, ""},
		{[]string{"version", "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{[]string{"run", "--dataplane-file", "dp.yaml", "--envoy", "false"}, exitUsage, "", "--envoy=false"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if code := dispatch(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.errs) {
			t.Errorf("%v: stdout %q, stderr %q; want %q and %q", tc.args, stdout.String(), stderr.String(), tc.out, tc.errs)
		}
	}
}

// run with a dataplane file that does not load: exit 1 after saying what to fix, nothing
// left serving.
func TestRunInvalidModelExits(t *testing.T) {
	dir := t.TempDir()
	dp := filepath.Join(dir, "dp.yaml")
	if err := os.WriteFile(dp, []byte("type: Dataplane\nname: web-1\nmesh: default\nnetworking: [1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := dispatch([]string{"run", "--dataplane-file", dp, "--policies-dir", dir, "--envoy=false", "--dns-proxy-port=0",
		"--admin-address", "127.0.0.1:0", "--work-dir", filepath.Join(dir, "work"), "--log-level", "debug"}, &stdout, &stderr)
	if code != exitInvalid || !strings.Contains(stderr.String(), "networking") {
		t.Fatalf("exit %d, want %d naming the bad field:\n%s", code, exitInvalid, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "work")); !os.IsNotExist(err) {
		t.Errorf("a failed start left its work dir: %v", err)
	}
}
