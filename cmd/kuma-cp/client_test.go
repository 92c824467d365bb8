package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/dirstore"
)

// clientEnv is the write API on a directory store in a temporary directory, its URL, the
// admin token's file, and a count of the requests it was sent.
func clientEnv(t *testing.T) (url, tokenFile string, requests *atomic.Int64) {
	t.Helper()
	st, err := dirstore.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	requests = &atomic.Int64{}
	h := (&api.Server{Store: st, AdminToken: "admin-secret", Status: func() any {
		return map[string]any{"store": "dir", "storeRevision": 42}
	}}).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tokenFile = filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, tokenFile, requests
}

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := dispatch(args, &out, &errb)
	return rc, out.String(), errb.String()
}

// What get prints in every format is applied back as it is: "unchanged" (-o json of one
// resource, or of a list, used to be refused: the API's envelope is not a resource).
func TestClientGetOutputAppliesBack(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	dir := t.TempDir()
	file := filepath.Join(dir, "dp.yaml")
	second := strings.Replace(dpWeb, "web-1", "web-2", 1)
	if err := os.WriteFile(file, []byte(dpWeb+"---\n"+second), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, out, errb := run("apply", "-f", file, u, "--admin-token-file", tok); rc != exitOK {
		t.Fatalf("apply: %d %s %s", rc, out, errb)
	}
	for _, c := range []struct {
		args []string
		n    int
	}{
		{[]string{"get", "dataplanes", "web-1", "-o", "json"}, 1}, {[]string{"get", "dataplanes", "-o", "json"}, 2},
		{[]string{"get", "dataplanes", "web-1", "-o", "yaml"}, 1}, {[]string{"get", "dataplanes", "-o", "yaml"}, 2},
	} {
		args := c.args
		rc, out, errb := run(append(args, u)...)
		if rc != exitOK {
			t.Fatalf("%v: exit %d: %s", args, rc, errb)
		}
		got := filepath.Join(dir, "got")
		if err := os.WriteFile(got, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		rc, applied, errb := run("apply", "-f", got, u, "--admin-token-file", tok)
		if rc != exitOK || strings.Count(applied, " unchanged") != c.n || strings.Contains(applied, "created") || strings.Contains(applied, "updated") {
			t.Errorf("%v, applied back: exit %d, stdout %q, stderr %q", args, rc, applied, errb)
		}
	}
}

// apply of nothing - a directory without a resource file, a file without a resource - is an
// error naming it, not a silent success (kubectl: "no objects passed to apply").
func TestClientApplyOfNothingFails(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	dir := t.TempDir()
	emptyDir := t.TempDir()
	emptyFile := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(emptyFile, []byte("# nothing yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{emptyDir, emptyFile} {
		rc, out, errb := run("apply", "-f", f, u, "--admin-token-file", tok)
		if rc != exitFail || !strings.Contains(errb, "no resource") || !strings.Contains(errb, filepath.Base(f)) {
			t.Errorf("apply -f %s (nothing in it): exit %d, stdout %q, stderr %q", f, rc, out, errb)
		}
	}
}
