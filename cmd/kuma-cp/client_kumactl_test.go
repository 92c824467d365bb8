package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
	applyFile(t, url, tok, dpWeb)
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

// get's tables are kumactl's per type: dataplanes MESH NAME TAGS ADDRESS AGE, other types
// MESH NAME AGE, a router (by NAME too) its view - no VERSION column (a store revision, on
// the directory store a 16-digit number), no TYPE column.
func TestClientTablesPerType(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	applyFile(t, url, tok, dpWeb)
	router, err := os.ReadFile("../../testdata/routes/shard-a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	applyFile(t, url, tok, string(router))
	for _, c := range []struct {
		args   []string
		header string
		row    *regexp.Regexp
	}{
		{[]string{"get", "dataplanes"}, "MESH     NAME   TAGS                 ADDRESS   AGE", regexp.MustCompile(`(?m)^default  web-1  kuma\.io/service=web  10\.0\.0\.1  \d+s$`)},
		{[]string{"get", "dataplane", "web-1"}, "MESH     NAME   TAGS                 ADDRESS   AGE", regexp.MustCompile(`(?m)^default  web-1  kuma\.io/service=web  10\.0\.0\.1  \d+s$`)},
		{[]string{"get", "traffic-routes"}, "MESH  NAME  AGE", nil},
		{[]string{"get", "routers", "shard-a"}, "NAME     DNS                       SELECTOR  NAMESPACES  READY  ROUTES", regexp.MustCompile(`(?m)^shard-a  shard-a\.apps\.example\.com  shard=a   shop,blog   0/0 `)},
		{[]string{"get", "routes", "web.shop"}, "NAMESPACE  NAME  HOST      TYPE    ROUTER  PHASE  DNS  ADMITTED  AGE", regexp.MustCompile(`(?m)^shop       web   www/cart  system  -       new`)},
	} {
		rc, out, errb := run(append(c.args, u)...)
		first, _, _ := strings.Cut(out, "\n")
		if rc != exitOK || strings.TrimRight(first, " ") != c.header || (c.row != nil && !c.row.MatchString(out)) || strings.Contains(out, "VERSION") {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s\nwant the header %q and a row %v", c.args, rc, errb, out, c.header, c.row)
		}
	}
}

// get routes -n NAMESPACE (and routebindings) lists that namespace's only, as `oc get routes
// -n`, in every format; it was refused ("give the route's NAME"). Another type's -n is still
// refused with exit 2.
func TestClientListRoutesOfANamespace(t *testing.T) {
	url, tok, _ := clientEnv(t)
	u := "--api-url=" + url
	route := func(name, ns string) string {
		return "type: Route\nname: " + name + "\nnamespace: " + ns + "\nhost: " + name + "-" + ns + "\nto: {service: web, port: 8080}\n"
	}
	applyFile(t, url, tok, route("web", "shop")+"---\n"+route("api.v1", "shop")+"---\n"+route("web", "blog")+"---\n"+route("shop", "shopping"))
	for _, args := range [][]string{{"get", "routes", "-n", "shop"}, {"get", "routes", "-n", "shop", "-o", "yaml"}, {"get", "routes", "--namespace=shop", "-o", "json"}} {
		rc, out, errb := run(append(args, u)...)
		if rc != exitOK || !strings.Contains(out, "web") || !strings.Contains(out, "api.v1") || strings.Contains(out, "blog") || strings.Contains(out, "shopping") {
			t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, rc, errb, out)
		}
	}
	rc, out, errb := run("get", "routes", "-n", "shop", "-o", "json", u)
	if rc != exitOK || !strings.Contains(out, `"total": 2`) {
		t.Errorf("get routes -n shop -o json: exit %d, stderr %q, stdout:\n%s", rc, errb, out)
	}
	if rc, out, errb := run("get", "routes", "-n", "none", u); rc != exitOK || strings.TrimSpace(out) != "NAMESPACE  NAME  HOST  TYPE  ROUTER  PHASE  DNS  ADMITTED  AGE" {
		t.Errorf("get routes -n none: exit %d, stderr %q, stdout:\n%s", rc, errb, out)
	}
	if rc, _, errb := run("get", "dataplanes", "-n", "shop", u); rc != exitUsage || !strings.Contains(errb, "-n") {
		t.Errorf("get dataplanes -n shop: exit %d, stderr %q", rc, errb)
	}
}
