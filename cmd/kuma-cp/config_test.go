package main

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/dirstore"
)

// kumactl's habit: control planes added once (API URL and admin token, in a file of mode
// 0600), then apply and get need no flag; switch changes the one used; KUMA_API_URL and
// KUMA_ADMIN_TOKEN stand between the file and the flags.
func TestConfigControlPlanes(t *testing.T) {
	dir := t.TempDir()
	srv := dirAPIServer(t, "s3cret")
	cfg := filepath.Join(dir, "conf", "config.yaml")
	t.Setenv(cli.EnvConfig, cfg)
	t.Setenv(cli.EnvAPIURL, "")
	t.Setenv(cli.EnvAdminToken, "")
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := dispatch(args, &out, &errb); rc != want {
			t.Fatalf("kuma-cp %s: exit %d, want %d\n%s%s", strings.Join(args, " "), rc, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	run(exitOK, "config", "control-planes", "add", "--name", "local", "--address", srv.URL, "--admin-token-file", token)
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v %v, want 0600", cfg, fi.Mode().Perm(), err)
	}
	if out := run(exitOK, "apply", "-f", "../../testdata/mesh/policies/virtualoutbounds-kuma.yaml"); !strings.Contains(out, "created") {
		t.Errorf("apply with the configured control plane:\n%s", out)
	}
	if out := run(exitOK, "get", "virtualoutbounds"); !strings.Contains(out, "kuma-versioned") {
		t.Errorf("get:\n%s", out)
	}
	run(exitOK, "config", "control-planes", "add", "--name", "down", "--address", "http://127.0.0.1:1")
	if out := run(exitOK, "config", "control-planes", "list"); !strings.Contains(out, "*       down   http://127.0.0.1:1") || !strings.Contains(out, "local") {
		t.Errorf("list:\n%s", out)
	}
	if out := run(exitFail, "get", "virtualoutbounds"); !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("get on the control plane added last:\n%s", out)
	}
	t.Setenv(cli.EnvAPIURL, srv.URL)
	run(exitOK, "get", "virtualoutbounds") // the variable over the file
	t.Setenv(cli.EnvAPIURL, "")
	run(exitOK, "config", "control-planes", "switch", "--name", "local")
	if out := run(exitOK, "delete", "virtualoutbounds", "kuma-versioned"); !strings.Contains(out, "deleted") {
		t.Errorf("delete with the configured token:\n%s", out)
	}
	run(exitFail, "config", "control-planes", "switch", "--name", "nope")
	run(exitOK, "config", "control-planes", "remove", "--name", "down")
}

// dirAPIServer is the API (admin token token) on a directory store of a temporary directory,
// in process: the client commands' tests talk to it.
func dirAPIServer(t *testing.T, token string) *httptest.Server {
	t.Helper()
	st, err := dirstore.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&api.Server{Store: st, AdminToken: token}).Handler())
	t.Cleanup(srv.Close)
	return srv
}
