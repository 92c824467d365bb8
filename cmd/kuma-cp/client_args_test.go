package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/certs"
)

// What a kumactl (or oc) user types: a bad command line is refused with exit 2 naming the
// flag or argument, before any request (an unknown -o used to be seen only once the
// resource was read, a NAME with --mesh '*' was asked for under mesh "*" and got a 404, an
// extra argument or a flag of another command was ignored, an --api-url without a scheme
// failed with a URL parser's message, an empty token file sent no token).
func TestClientRefusesBadCommandLines(t *testing.T) {
	url, tok, requests := clientEnv(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u := "--api-url=" + url
	for _, c := range []struct {
		args  []string
		inErr string
	}{
		{[]string{"get", "dataplanes", "web-1", "extra", u}, `"extra"`},
		{[]string{"get", "dataplanes", "web-1", "--mesh", "*", u}, "--mesh"},
		{[]string{"delete", "dataplanes", "web-1", "--mesh", "*", u, "--admin-token-file", tok}, "--mesh"},
		{[]string{"delete", "dataplanes", "web-1", "extra", u, "--admin-token-file", tok}, `"extra"`},
		{[]string{"get", "dataplanes", "nope", "-o", "yml", u}, `-o "yml"`},
		{[]string{"get", "status", "-o", "wide", u}, `-o "wide"`},
		{[]string{"get", "dataplanes", "--api-url", strings.TrimPrefix(url, "http://")}, "--api-url"},
		{[]string{"get", "dataplanes", "--api-url", "ftp://x"}, "--api-url"},
		{[]string{"delete", "dataplanes", "web-1", u, "--admin-token-file", empty}, "--admin-token-file"},
		{[]string{"get", "dataplanes", "-f", "x.yaml", u}, "--filename"},
		{[]string{"get", "dataplanes", "--wait", u}, "--wait"},
		{[]string{"apply", "-f", "x.yaml", "--mesh", "other", u, "--admin-token-file", tok}, "--mesh"},
		{[]string{"apply", "-f", "x.yaml", "-o", "json", u, "--admin-token-file", tok}, "--output"},
		{[]string{"get", "dataplanes", "web-1", "-n", "shop", u}, "-n"},
		{[]string{"describe", "router", "shard-a", "--mesh", "*", u}, "--mesh"},
		{[]string{"get", "dataplanes", "--mesh", "", u}, "--mesh"},
		{[]string{"delete", "dataplanes", "web-1", "-m", "", u, "--admin-token-file", tok}, "--mesh"},
		{[]string{"describe", "route", "web", "-n", "shop", "-m", "*", u}, "--mesh"},
		{[]string{"describe", "router", "shard-a", "-n", "shop", u}, "-n"},
		{[]string{"get", "routers", "shard-a", "-n", "shop", u}, "-n"},
		{[]string{"get", "routers", "shard-a", "-m", "*", u}, "--mesh"},
		{[]string{"inspect", "routes", u}, "only dataplanes"},
		{[]string{"inspect", u}, "inspect dataplanes"},
		{[]string{"inspect", "dataplanes", "-o", "wide", u}, `-o "wide"`},
	} {
		rc, out, errb := run(c.args...)
		if rc != exitUsage || !strings.Contains(errb, c.inErr) {
			t.Errorf("%v: exit %d (want %d), stderr %q, want it to name %s; stdout %q", c.args, rc, exitUsage, errb, c.inErr, out)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for command lines refused", n)
	}
}

// kumactl's habits: `get dataplane NAME` (the singular, as kumactl names one resource),
// a kind's name or kumactl's hyphenated one, -m for --mesh; a missing resource exits 1
// naming it; -o json of get status is JSON.
func TestClientKumactlHabits(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	dir := t.TempDir()
	file := filepath.Join(dir, "dp.yaml")
	if err := os.WriteFile(file, []byte(dpWeb), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, out, errb := run("apply", "-f", file, u, "--admin-token-file", tok); rc != exitOK || !strings.Contains(out, "created") {
		t.Fatalf("apply: %d %s %s", rc, out, errb)
	}
	for _, args := range [][]string{
		{"get", "dataplane", "web-1"}, {"get", "Dataplane", "web-1"}, {"get", "dataplanes", "web-1", "-m", "default"},
		{"get", "dataplanes", "-m", "default"},
	} {
		rc, out, errb := run(append(args, u)...)
		if rc != exitOK || !strings.Contains(out, "web-1") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, rc, out, errb)
		}
	}
	if rc, out, errb := run("get", "traffic-routes", u); rc != exitOK || !strings.Contains(out, "MESH") {
		t.Errorf("get traffic-routes: exit %d, stdout %q, stderr %q", rc, out, errb)
	}
	if rc, _, errb := run("get", "dataplane", "nope", u); rc != exitFail || !strings.Contains(errb, "nope") || !strings.Contains(errb, "default") {
		t.Errorf("get a missing dataplane: exit %d, stderr %q", rc, errb)
	}
	rc, out, errb := run("get", "status", "-o", "json", u)
	var st map[string]any
	if rc != exitOK || json.Unmarshal([]byte(out), &st) != nil || st["store"] != "dir" {
		t.Errorf("get status -o json: exit %d, stdout %q, stderr %q", rc, out, errb)
	}

}

// Every command reached nowhere (nothing listens at --api-url) exits 1 saying where it
// looked and what to check - get status said only "connection refused".
func TestClientNothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "--api-url=http://" + ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"get", "status"}, {"get", "dataplanes"}, {"get", "dataplanes", "x"}, {"inspect", "dataplanes"}, {"describe", "routes", "a.b"},
	} {
		rc, _, errb := run(append(args, u)...)
		if rc != exitFail || !strings.Contains(errb, "is kuma-cp serving its API there? --api-url") {
			t.Errorf("%v with nothing listening: exit %d, stderr %q", args, rc, errb)
		}
	}
}

// fullWriter fails every write, as standard output on a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// What get or token prints that cannot be written (a full disk) exits 1 saying
// so - a list exited 2 with "Run 'kuma-cp get --help' for the flags", one resource in YAML
// and get status exited 0 with nothing written.
func TestClientOutputNotWritten(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	file := filepath.Join(t.TempDir(), "dp.yaml")
	if err := os.WriteFile(file, []byte(dpWeb), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, out, errb := run("apply", "-f", file, u, "--admin-token-file", tok); rc != exitOK {
		t.Fatalf("apply: %d %s %s", rc, out, errb)
	}
	for _, args := range [][]string{
		{"get", "dataplanes"}, {"get", "dataplanes", "-o", "json"}, {"get", "dataplanes", "-o", "yaml"},
		{"get", "dataplanes", "web-1"}, {"get", "dataplanes", "web-1", "-o", "yaml"}, {"get", "dataplanes", "web-1", "-o", "json"},
		{"get", "status"}, {"get", "status", "-o", "yaml"}, {"get", "routes"}, {"get", "routers"},
	} {
		var errb bytes.Buffer
		rc := dispatch(append(args, u), fullWriter{}, &errb)
		if rc != exitFail || !strings.Contains(errb.String(), "no space left on device") || strings.Contains(errb.String(), "--help") {
			t.Errorf("%v to a full disk: exit %d, stderr %q", args, rc, errb.String())
		}
	}
	// kuma-cp token > file: an empty file and exit 0
	dir := t.TempDir()
	if rc, _, errb := run("certs", "--out-dir", dir); rc != exitOK {
		t.Fatalf("certs: %d %s", rc, errb)
	}
	var errb bytes.Buffer
	rc := dispatch([]string{"token", "--token-key-file", filepath.Join(dir, certs.TokenKeyFile), "--name", "web-1"}, fullWriter{}, &errb)
	if rc != exitFail || !strings.Contains(errb.String(), "no space left on device") {
		t.Errorf("token to a full disk: exit %d, stderr %q", rc, errb.String())
	}
}
