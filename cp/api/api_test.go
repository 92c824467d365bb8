package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

const voDoc = `type: VirtualOutbound
mesh: default
name: by-version
selectors:
- match:
    kuma.io/service: "*"
    version: "*"
conf:
  host: "{{.version}}.{{.service}}.mesh"
  port: "8080"
  parameters:
  - name: service
    tagKey: kuma.io/service
  - name: version
    tagKey: version
`

const token = "admin-secret"

func startAPI(t *testing.T) (*etcdtest.Cluster, *store.Etcd, *Client) {
	c := etcdtest.Start(t, 3)
	st := store.NewEtcd(c.Client(), "/kuma")
	st.Timeout = 2 * time.Second
	srv := httptest.NewServer((&Server{Store: st, AdminToken: token}).Handler())
	t.Cleanup(srv.Close)
	return c, st, NewClient(srv.URL, token)
}

func TestApplyGetDelete(t *testing.T) {
	_, st, cl := startAPI(t)
	ctx := context.Background()
	applied, err := cl.Apply(ctx, "vo.yaml", []byte(voDoc))
	if err != nil || len(applied) != 1 || applied[0].Result != "created" {
		t.Fatalf("apply: %+v %v", applied, err)
	}
	if applied, _ = cl.Apply(ctx, "vo.yaml", []byte(voDoc)); applied[0].Result != "unchanged" {
		t.Fatalf("apply again: %+v", applied)
	}
	changed := strings.Replace(voDoc, `"{{.version}}.{{.service}}.mesh"`, `"{{.service}}.{{.version}}.mesh"`, 1)
	if applied, _ = cl.Apply(ctx, "vo.yaml", []byte(changed)); applied[0].Result != "updated" {
		t.Fatalf("apply a change: %+v", applied)
	}
	r, err := cl.Get(ctx, "default", "virtualoutbounds", "by-version")
	if err != nil || !strings.Contains(string(r.Spec), `{{.service}}.{{.version}}.mesh`) || r.CreationTime.IsZero() || r.ModificationTime.Before(r.CreationTime) {
		t.Fatalf("get: %+v %v", r, err)
	}
	items, err := cl.List(ctx, "default", "virtualoutbounds")
	if err != nil || len(items) != 1 {
		t.Fatalf("list: %v %v", items, err)
	}
	if err := cl.Delete(ctx, "default", "virtualoutbounds", "by-version"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, store.Key{Mesh: "default", Type: "VirtualOutbound", Name: "by-version"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func put(t *testing.T, cl *Client, path, body, token, ifMatch string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, cl.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

// Bad writes: each with its status and a message that names what is wrong; nothing stored.
func TestWritesRefused(t *testing.T) {
	c, st, cl := startAPI(t)
	p := "/meshes/default/virtualoutbounds/by-version"
	if resp, body := put(t, cl, p, voDoc, "", ""); resp.StatusCode != 401 {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	bad := strings.Replace(voDoc, "  port: \"8080\"", "  prot: \"8080\"", 1)
	if resp, body := put(t, cl, p, bad, token, ""); resp.StatusCode != 400 || !strings.Contains(body, "conf.prot") {
		t.Fatalf("invalid resource: %d %s", resp.StatusCode, body)
	}
	if resp, body := put(t, cl, "/meshes/default/virtualoutbounds/other-name", voDoc, token, ""); resp.StatusCode != 400 || !strings.Contains(body, "name") {
		t.Fatalf("name mismatch: %d %s", resp.StatusCode, body)
	}
	if items, _, _, _ := st.List(context.Background(), "", "", "", 0); len(items) != 0 {
		t.Fatalf("refused writes were stored: %v", items)
	}
	resp, _ := put(t, cl, p, voDoc, token, "")
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	version := resp.Header.Get("ETag")
	// An entity tag is quoted (RFC 9110 8.8.3), so proxies and HTTP libraries keep it; the
	// client echoes it as If-Match.
	if len(version) < 3 || version[0] != '"' || version[len(version)-1] != '"' {
		t.Fatalf("ETag %q: want a quoted entity tag", version)
	}
	if resp, body := put(t, cl, p, voDoc, token, ""); resp.StatusCode != 409 || !strings.Contains(body, "If-Match") {
		t.Fatalf("create over an existing one: %d %s", resp.StatusCode, body)
	}
	if resp, _ := put(t, cl, p, voDoc, token, version); resp.StatusCode != 200 {
		t.Fatalf("update with the version read: %d", resp.StatusCode)
	}
	if resp, body := put(t, cl, p, voDoc, token, version); resp.StatusCode != 409 {
		t.Fatalf("a stale version: %d %s", resp.StatusCode, body)
	}
	c.Kill(0)
	c.Kill(1)
	if resp, body := put(t, cl, "/meshes/default/virtualoutbounds/x", strings.Replace(voDoc, "name: by-version", "name: x", 1), token, ""); resp.StatusCode != 503 {
		t.Fatalf("no quorum: %d %s", resp.StatusCode, body)
	}
}

// A very large resource: one that etcd cannot hold is refused with 413 naming its size and
// the limit (it was a 500 carrying gRPC's or etcd's own text), nothing stored; one just under
// the limit is stored and read back whole.
func TestLargeResource(t *testing.T) {
	_, st, cl := startAPI(t)
	p := "/meshes/default/virtualoutbounds/by-version"
	for _, size := range []int{1200 << 10, 1600 << 10, 3 << 20} {
		big := voDoc + "# " + strings.Repeat("x", size) + "\n"
		resp, body := put(t, cl, p, big, token, "")
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, strconv.Itoa(len(big))) || !strings.Contains(body, strconv.Itoa(store.MaxDocBytes)) {
			t.Fatalf("a %d-byte resource: %d %s", len(big), resp.StatusCode, body)
		}
	}
	if _, err := st.Get(context.Background(), store.Key{Mesh: "default", Type: "VirtualOutbound", Name: "by-version"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused resource was stored: %v", err)
	}
	fits := voDoc + "# " + strings.Repeat("x", store.MaxDocBytes-len(voDoc)-3) + "\n"
	if resp, body := put(t, cl, p, fits, token, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a resource of %d bytes (the limit): %d %s", len(fits), resp.StatusCode, body)
	}
	got, err := cl.Get(context.Background(), "default", "virtualoutbounds", "by-version")
	if err != nil || got.Version == 0 {
		t.Fatalf("get: %v", err)
	}
	it, err := st.Get(context.Background(), store.Key{Mesh: "default", Type: "VirtualOutbound", Name: "by-version"})
	if err != nil || string(it.Doc) != fits {
		t.Fatalf("read back: %d bytes, want %d: %v", len(it.Doc), len(fits), err)
	}
}

// apply -f of several files (a directory, or -f twice) checks every document of every file
// before writing any: one invalid file names each problem and nothing is written (the files
// before it used to be applied, half the change landing).
func TestApplyAllChecksEveryFileFirst(t *testing.T) {
	_, st, cl := startAPI(t)
	ctx := context.Background()
	other := strings.Replace(voDoc, "name: by-version", "name: other", 1)
	bad := strings.Replace(voDoc, "  port: \"8080\"", "  port: \"99999\"", 1)
	badToo := strings.Replace(other, "kuma.io/service: \"*\"", "\"\": \"*\"", 1)
	_, err := cl.ApplyAll(ctx, []Source{{Name: "a.yaml", Data: []byte(other)}, {Name: "b.yaml", Data: []byte(bad)}, {Name: "c.yaml", Data: []byte(badToo)}})
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "99999") || !strings.Contains(err.Error(), "c.yaml") {
		t.Fatalf("apply with invalid files: %v, want both files' problems", err)
	}
	if items, _, _, _ := st.List(ctx, "", "", "", 0); len(items) != 0 {
		t.Fatalf("an apply refused for an invalid file wrote %d resources", len(items))
	}
	applied, err := cl.ApplyAll(ctx, []Source{{Name: "a.yaml", Data: []byte(other)}, {Name: "b.yaml", Data: []byte(voDoc)}})
	if err != nil || len(applied) != 2 || applied[0].Name != "other" || applied[1].Name != "by-version" || applied[1].Result != "created" {
		t.Fatalf("apply of two valid files: %+v %v", applied, err)
	}
}

// A HostnameGenerator without a mesh applies to every mesh and is stored under mesh default
// (where apply writes it): a write of one under another mesh's URL is refused - it used to
// be stored beside it, and agents were served whichever copy came last by key, so apply's
// edits of the default one could go unseen.
func TestMeshlessResourceOnlyUnderDefault(t *testing.T) {
	_, st, cl := startAPI(t)
	hg := "kind: HostnameGenerator\nmetadata:\n  name: everywhere\nspec:\n  selector:\n    meshExternalService:\n      matchLabels: {a: b}\n  template: \"{{ .Name }}.ext.mesh\"\n"
	if resp, body := put(t, cl, "/meshes/other/hostnamegenerators/everywhere", hg, token, ""); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "default") {
		t.Fatalf("a meshless resource under mesh other: %d %s", resp.StatusCode, body)
	}
	if items, _, _, _ := st.List(context.Background(), "", "", "", 0); len(items) != 0 {
		t.Fatalf("stored: %v", items)
	}
	if resp, body := put(t, cl, "/meshes/default/hostnamegenerators/everywhere", hg, token, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("under default: %d %s", resp.StatusCode, body)
	}
	if a, err := cl.Apply(context.Background(), "hg.yaml", []byte(hg)); err != nil || a[0].Result != "unchanged" || a[0].Mesh != "default" {
		t.Fatalf("apply: %+v %v", a, err)
	}
}

// A DNSZone is the control plane's own: a write of one is refused, under any type's URL
// and by apply before anything is written, with the reason; nothing is stored.
func TestDNSZoneNeverApplied(t *testing.T) {
	_, st, cl := startAPI(t)
	zone := testutil.GeneratingZone()
	for _, typ := range []string{"routers", "dnszones"} {
		resp, body := put(t, cl, "/meshes/default/"+typ+"/evil.test", zone, token, "")
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Errorf("PUT under %s: %d %s", typ, resp.StatusCode, body)
		}
		if typ == "routers" && !strings.Contains(body, "built by the control plane") {
			t.Errorf("PUT under %s does not say why: %s", typ, body)
		}
	}
	if _, err := cl.Apply(context.Background(), "zone.yaml", []byte(voDoc+"---\n"+zone)); err == nil || !strings.Contains(err.Error(), `zone.yaml#2: dnszone "evil.test"`) {
		t.Errorf("apply: %v", err)
	}
	if items, _, _, _ := st.List(context.Background(), "", "", "", 0); len(items) != 0 {
		t.Fatalf("stored: %v", items)
	}
}
