package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The write API on the directory store (the default): `kuma-cp apply` updates a
// hand-written file in place and writes a new resource to a file of its own; the agents see
// both; a stale version gets 409; `kuma-cp delete` removes the file; get lists.
func TestE2EApplyToTheDirectory(t *testing.T) {
	e := meshEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start("--admin-token-file", e.path("admin.token"), "--api-address", "127.0.0.1:0")
	if e.api == "" {
		t.Fatal("no API address in the ready file")
	}
	a := startAgent(t, e, e.address, true, "--name", "httpbin-1", "--mesh", "default",
		"--dataplane-token-file", e.token("httpbin-1", "default"))
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("v1.httpbin.mesh not answered before the change")
	}
	tok := e.path("admin.token")
	write := testutil.TempFiles(t)
	changed := virtualOutbound("default", "{{service}}.{{version}}.applied.mesh")
	extra := strings.Replace(virtualOutbound("default", "{{service}}.extra.mesh"), "name: by-version", "name: extra", 1)
	voFile := write("vo.yaml", changed+"---\n"+extra)
	out := e.kumaCP("apply", "-f", voFile, "--api-url", "http://"+e.api, "--admin-token-file", tok)
	if !strings.Contains(out, "virtualoutbounds default/by-version updated") || !strings.Contains(out, "virtualoutbounds default/extra created") {
		t.Fatalf("apply: %s", out)
	}
	// apply sends each resource's canonical document (keys sorted, no unset creation time).
	if b, _ := os.ReadFile(filepath.Join(e.resources, "vo.yaml")); !strings.Contains(string(b), "applied.mesh") || strings.Contains(string(b), "creationTime") {
		t.Fatalf("the hand-written file was not updated in place:\n%s", b)
	}
	newFile := filepath.Join(e.resources, "default", "virtualoutbound-extra.yaml")
	if b, err := os.ReadFile(newFile); err != nil || !strings.Contains(string(b), "name: extra") {
		t.Fatalf("the new resource's file %s: %q %v", newFile, b, err)
	}
	waitFor(t, "the applied names answered", 5*time.Second, func() bool {
		return a.answers("httpbin.v1.applied.mesh") && a.answers("httpbin.extra.mesh")
	})
	if out := e.kumaCP("apply", "-f", voFile, "--api-url", "http://"+e.api, "--admin-token-file", tok); !strings.Contains(out, "virtualoutbounds default/extra unchanged") {
		t.Fatalf("apply again: %s", out)
	}

	// apply -f DIR with one invalid file: every file is checked first, nothing is written.
	batch := t.TempDir()
	good := strings.Replace(virtualOutbound("default", "{{service}}.batch.mesh"), "name: by-version", "name: batch", 1)
	if err := os.WriteFile(filepath.Join(batch, "a.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(batch, "b.yaml"), []byte("type: VirtualOutbound\nname: broken\nconf: {port: nope}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sout, serr strings.Builder
	if rc := dispatch([]string{"apply", "-f", batch, "--api-url", "http://" + e.api, "--admin-token-file", tok}, &sout, &serr); rc == exitOK || !strings.Contains(serr.String(), "b.yaml") {
		t.Fatalf("apply -f DIR with an invalid file: exit %d\n%s%s", rc, sout.String(), serr.String())
	}
	if _, err := os.Stat(filepath.Join(e.resources, "default", "virtualoutbound-batch.yaml")); !os.IsNotExist(err) {
		t.Fatalf("apply -f DIR with an invalid file wrote the valid one: %v", err)
	}

	// A write naming a version that is not the current one: 409, the file unchanged.
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.api+"/meshes/default/virtualoutbounds/extra", strings.NewReader(extra))
	req.Header.Set("Authorization", "Bearer admin-secret")
	req.Header.Set("If-Match", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("a stale version: %d, want 409", resp.StatusCode)
	}

	if out := e.kumaCP("get", "virtualoutbounds", "--api-url", "http://"+e.api); !strings.Contains(out, "extra") || !strings.Contains(out, "by-version") {
		t.Fatalf("get: %s", out)
	}
	e.kumaCP("delete", "virtualoutbounds", "extra", "--api-url", "http://"+e.api, "--admin-token-file", tok)
	if _, err := os.Stat(newFile); !os.IsNotExist(err) {
		t.Fatalf("the deleted resource's file is still there: %v", err)
	}
	waitFor(t, "the deleted name gone", 5*time.Second, func() bool { return !a.answers("httpbin.extra.mesh") })
}
