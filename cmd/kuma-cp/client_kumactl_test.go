package main

import (
	"os"
	"path/filepath"
	"testing"
)

// applyFile applies body (YAML) with kuma-cp apply against the API at url.
func applyFile(t *testing.T, url, tok, body string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, out, errb := run("apply", "-f", file, "--api-url="+url, "--admin-token-file", tok); rc != exitOK {
		t.Fatalf("apply: exit %d %s %s", rc, out, errb)
	}
}

// A resource that is not there reads as kumactl's error does - "Error: ...", naming the
// type, the name (and a route's namespace) and the mesh - with exit 1, for get, delete and
// describe; it read "kuma-cp get: 404 Not Found: default/Dataplane/nope: not found".
func TestClientNotFoundReadsAsKumactl(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	applyFile(t, url, tok, clientDataplane)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "dataplane", "nope"}, `Error: Dataplane "nope" not found in mesh "default"` + "\n"},
		{[]string{"get", "virtual-outbounds", "nope", "-m", "other"}, `Error: VirtualOutbound "nope" not found in mesh "other"` + "\n"},
		{[]string{"delete", "dataplanes", "nope", "--admin-token-file", tok}, `Error: Dataplane "nope" not found in mesh "default"` + "\n"},
		{[]string{"get", "routes", "web", "-n", "shop"}, `Error: Route "web" not found in namespace "shop" of mesh "default"` + "\n"},
		{[]string{"get", "routes", "web.shop"}, `Error: Route "web" not found in namespace "shop" of mesh "default"` + "\n"},
		{[]string{"get", "routes", "web"}, `Error: Route "web" not found in mesh "default" (a route is named NAME.NAMESPACE: give -n NAMESPACE)` + "\n"},
		{[]string{"describe", "router", "nope"}, `Error: Router "nope" not found in mesh "default"` + "\n"},
		{[]string{"describe", "route", "web", "-n", "shop"}, `Error: Route "web" not found in namespace "shop" of mesh "default"` + "\n"},
	} {
		rc, out, errb := run(append(c.args, u)...)
		if rc != exitFail || errb != c.want || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", c.args, rc, out, errb, c.want)
		}
	}
}
