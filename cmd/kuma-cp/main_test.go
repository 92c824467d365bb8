package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/token"
)

func TestCLI(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"--help"}, exitOK, "kuma-cp serve --resources-dir", ""},
		{[]string{"serve", "--help"}, exitOK, "--token-key-file", ""},
		{[]string{"nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"version"}, exitOK, "kuma-cp dev (", ""},
		{[]string{"serve", "--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"serve"}, exitUsage, "", "--resources-dir is required"},
		{[]string{"serve", "--resources-dir", filepath.Join(dir, "missing")}, exitUsage, "", "not a readable directory"},
		{[]string{"serve", "--resources-dir", dir, "--token-key-file", filepath.Join(dir, "k")}, exitFail, "", "--token-key-file"},
		{[]string{"serve", "--resources-dir", dir, "--log-level", "loud"}, exitUsage, "", `--log-level "loud"`},
		{[]string{"token", "--name", "a"}, exitUsage, "", "is required (missing: --token-key-file)"},
		{[]string{"token", "--mesh", ""}, exitUsage, "", "are required (missing: --mesh, --name, --token-key-file)"},
		{[]string{"certs", "--out-dir", dir}, exitOK, "ca.crt", ""},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := dispatch(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.inErr) {
			t.Errorf("%v: exit %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"token", "--token-key-file", filepath.Join(dir, certs.TokenKeyFile), "--name", "web-1"}, &out, &errb); code != exitOK {
		t.Fatalf("token: %d %s", code, errb.String())
	}
	key, err := token.ReadKey(filepath.Join(dir, certs.TokenKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := token.Verify(key, strings.TrimSpace(out.String()), time.Now()); err != nil || id.Name != "web-1" || id.Mesh != "default" || id.Expires == 0 {
		t.Errorf("issued token: %+v %v", id, err)
	}
}

// helpCommands are the command lines of a help text that start with prog, continuation
// lines joined.
func helpCommands(text, prog string) [][]string {
	var out [][]string
	var cur string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if cur != "" {
			cur += " " + strings.TrimSuffix(line, "\\")
			if !strings.HasSuffix(line, "\\") {
				out = append(out, strings.Fields(cur))
				cur = ""
			}
			continue
		}
		if !strings.HasPrefix(line, prog+" ") || strings.Contains(line, "<") {
			continue // not a command line, or the usage synopsis
		}
		if strings.HasSuffix(line, "\\") {
			cur = strings.TrimSuffix(line, "\\")
			continue
		}
		out = append(out, strings.Fields(line))
	}
	return out
}

// The examples of `kuma-cp --help`, run as written on the bundled files (only /tmp/cp made a
// temporary directory and the fixed port a free one): the certificates, the control plane,
// the token for the bundled dataplane, and the agent that uses it all becomes ready.
func TestHelpExamplesWork(t *testing.T) {
	var help bytes.Buffer
	dispatch([]string{"--help"}, &help, &help)
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	var cpAddr string
	ran := map[string]bool{}
	for _, args := range helpCommands(help.String(), "kuma-cp") {
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "/tmp/cp", dir)
		}
		var redirect string
		if i := slices.Index(args, ">"); i >= 0 {
			redirect, args = args[i+1], args[:i]
		}
		ran[args[1]] = true
		switch args[1] {
		case "serve":
			cpBin, _ := binaries(t)
			for i := range args {
				if args[i] == "--address" {
					args[i+1] = "127.0.0.1:0"
				}
				if strings.HasPrefix(args[i], "testdata/") {
					args[i] = filepath.Join(root, args[i])
				}
			}
			ready := filepath.Join(dir, "ready.json")
			p := startProc(t, "kuma-cp", cpBin, append(args[1:], "--ready-file", ready, "--metrics-address", "127.0.0.1:0")...)
			var r struct{ Address string }
			p.readyJSON(ready, &r)
			cpAddr = r.Address
		default:
			var out, errb bytes.Buffer
			if rc := dispatch(args[1:], &out, &errb); rc != exitOK {
				t.Fatalf("%v: exit %d: %s", args, rc, errb.String())
			}
			if redirect != "" {
				if err := os.WriteFile(redirect, out.Bytes(), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, c := range []string{"certs", "serve", "token"} {
		if !ran[c] {
			t.Fatalf("the help has no %s example", c)
		}
	}
	dps := helpCommands(help.String(), "kuma-dp")
	if len(dps) != 1 {
		t.Fatalf("want one kuma-dp example, got %v", dps)
	}
	args := dps[0]
	for i := range args {
		args[i] = strings.ReplaceAll(strings.ReplaceAll(args[i], "/tmp/cp", dir), "127.0.0.1:5678", cpAddr)
		if strings.HasPrefix(args[i], "testdata/") {
			args[i] = filepath.Join(root, args[i])
		}
	}
	_, dpBin := binaries(t)
	work := t.TempDir()
	ready := filepath.Join(work, "ready.json")
	p := startProc(t, "kuma-dp", dpBin, append(args[1:], "--dns-address", "127.0.0.1", "--dns-proxy-port", "0",
		"--admin-address", "127.0.0.1:0", "--work-dir", work, "--ready-file", ready, "--dns-upstream", "127.0.0.1:9")...)
	var r struct{ DNSUDP []string }
	p.readyJSON(ready, &r) // ready: the token named the bundled dataplane, the link synced
}

// Every command's --help ends with an example of that command, and every kuma-cp line of
// every help names only flags the command has, with values of the right type (the line is
// parsed with --help appended: an unknown flag or a value of the wrong type exits 2 before
// --help is seen). The examples are run on real processes by TestHelpExamplesWork,
// TestClientHelpExamplesWork and TestRouteHelpExamplesWork.
func TestEveryHelpHasWorkingExampleFlags(t *testing.T) {
	cmds := []string{"serve", "apply", "get", "delete", "zones", "describe", "token", "certs"}
	var root bytes.Buffer
	dispatch([]string{"--help"}, &root, &root)
	texts := map[string]string{"": root.String()}
	for _, c := range cmds {
		var out, errb bytes.Buffer
		if rc := dispatch([]string{c, "--help"}, &out, &errb); rc != exitOK {
			t.Fatalf("%s --help: exit %d: %s", c, rc, errb.String())
		}
		texts[c] = out.String()
		i := strings.Index(out.String(), "Example")
		own := false
		if i >= 0 {
			for _, args := range helpCommands(out.String()[i:], "kuma-cp") {
				own = own || args[1] == c
			}
		}
		if !own {
			t.Errorf("kuma-cp %s --help has no example of %s:\n%s", c, c, out.String())
		}
	}
	for name, text := range texts {
		for _, args := range helpCommands(text, "kuma-cp") {
			if i := slices.Index(args, ">"); i >= 0 {
				args = args[:i]
			}
			args = slices.DeleteFunc(args, func(a string) bool { return a == "&" })
			var out, errb bytes.Buffer
			if rc := dispatch(append(args[1:], "--help"), &out, &errb); rc != exitOK {
				t.Errorf("kuma-cp %s --help: the example %q: exit %d: %s", name, strings.Join(args, " "), rc, errb.String())
			}
		}
	}
}

// kuma-cp zones refuses the same --dns-user-zone values as serve, before reaching etcd.
func TestZonesUserZoneRefused(t *testing.T) {
	var out, errb bytes.Buffer
	rc := dispatch([]string{"zones", "--etcd-endpoints", "http://127.0.0.1:1", "--dns-user-zone", "com"}, &out, &errb)
	if rc != exitUsage || !strings.Contains(errb.String(), `kuma-cp zones: --dns-user-zone: users' zone "com": a top-level domain`) {
		t.Errorf("exit %d: %s", rc, errb.String())
	}
}
