package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
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
		{[]string{"serve", "--bogus"}, exitUsage, "", "unknown flag: --bogus"},
		{[]string{"serve"}, exitFail, "", "--resources-dir is required"},
		{[]string{"serve", "--resources-dir", filepath.Join(dir, "missing")}, exitFail, "", "not a readable directory"},
		{[]string{"serve", "--resources-dir", dir, "--token-key-file", filepath.Join(dir, "k")}, exitFail, "", "--token-key-file"},
		{[]string{"serve", "--resources-dir", dir, "--log-level", "loud"}, exitUsage, "", `--log-level "loud"`},
		{[]string{"token", "--name", "a"}, exitUsage, "", "--token-key-file, --name and --mesh are required"},
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
	if code := dispatch([]string{"token", "--token-key-file", filepath.Join(dir, tokenKey), "--name", "web-1"}, &out, &errb); code != exitOK {
		t.Fatalf("token: %d %s", code, errb.String())
	}
	key, err := readKey(filepath.Join(dir, tokenKey))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := verifyToken(key, strings.TrimSpace(out.String())); err != nil || id.Name != "web-1" || id.Mesh != "default" {
		t.Errorf("issued token: %+v %v", id, err)
	}
}
