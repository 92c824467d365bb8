package api

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/dirstore"
)

// A hand-written file as a directory store holds it: the Kubernetes form, a comment, a tag
// value written as a number, a document that is YAML only, beside one in the plain form.
const handWritten = `# payments, as exported from Kubernetes
apiVersion: kuma.io/v1alpha1
kind: Dataplane
mesh: default
metadata:
  name: payments-1
  namespace: payments-ns
spec:
  networking:
    address: 10.0.6.1
    inbound:
    - port: 8080
      tags:
        kuma.io/service: payments
        version: 10 # a number in YAML
---
# YAML only: the unquoted template reads as text (docs/mesh.md), so the store serves it as text
kind: HostnameGenerator
metadata:
  name: k8s-meshext-hostnames
spec:
  selector:
    meshExternalService:
      matchLabels:
        my-service.io/access: "true"
  template: {{ name }}.svc.meshext.local
---
type: VirtualOutbound
mesh: default
name: by-version
selectors:
- match: {kuma.io/service: "*", version: "*"}
conf:
  host: "{{.version}}.{{.service}}.mesh"
  port: "8080"
  parameters:
  - {name: service, tagKey: kuma.io/service}
  - {name: version, tagKey: version}
`

// dirAPI is the write API on a directory store of dir, and its client.
func dirAPI(t *testing.T, dir string) *Client {
	t.Helper()
	st, err := dirstore.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{Store: st, AdminToken: token}).Handler())
	t.Cleanup(srv.Close)
	return NewClient(srv.URL, token)
}

// Applying the very files a directory store serves says "unchanged" for each resource and
// leaves the files byte for byte (it used to say "updated" and rewrite every document not
// in the canonical form, comments gone); a real change is still "updated".
func TestApplyUnchangedOnHandWrittenDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(file, []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := dirAPI(t, dir)
	ctx := context.Background()

	applied, err := cl.Apply(ctx, "mesh.yaml", []byte(handWritten))
	if err != nil || len(applied) != 3 {
		t.Fatalf("apply: %+v %v", applied, err)
	}
	for _, a := range applied {
		if a.Result != "unchanged" {
			t.Errorf("%s %s/%s: %s, want unchanged", a.Type, a.Mesh, a.Name, a.Result)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != handWritten {
		t.Fatalf("the file was rewritten:\n%s", b)
	}

	changed := strings.Replace(handWritten, "address: 10.0.6.1", "address: 10.0.6.2", 1)
	applied, err = cl.Apply(ctx, "mesh.yaml", []byte(changed))
	if err != nil || len(applied) != 3 || applied[0].Result != "updated" || applied[1].Result != "unchanged" || applied[2].Result != "unchanged" {
		t.Fatalf("apply a changed address: %+v %v", applied, err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "10.0.6.2") || !strings.Contains(string(b), `host: "{{.version}}.{{.service}}.mesh"`) {
		t.Fatalf("after the change:\n%s", b)
	}
}

// get status shows the fields the control plane reports and no others, numbers as integers:
// a directory store's (no replica, no leader; a revision of 16 digits) and an etcd replica's.
func TestPrintStatus(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"dir":"/tmp/cp/resources","store":"dir","storeRevision":1795581925615651}`,
			"store:         dir\ndir:           /tmp/cp/resources\nstoreRevision: 1795581925615651\n"},
		{`{"replica":"cp-1","leader":"cp-2","isLeader":false,"storeRevision":5,"synced":true}`,
			"replica:       cp-1\nleader:        cp-2\nisLeader:      false\nstoreRevision: 5\nsynced:        true\n"},
		{`{"storeRevision":7,"zones":3}`, "storeRevision: 7\nzones:         3\n"},
	} {
		var b strings.Builder
		if err := PrintStatus(&b, strings.NewReader(c.body)); err != nil || b.String() != c.want {
			t.Errorf("%s:\n%s(%v), want\n%s", c.body, b.String(), err, c.want)
		}
	}
	if err := PrintStatus(&strings.Builder{}, strings.NewReader("<html>")); err == nil || !strings.Contains(err.Error(), "GET /status") {
		t.Errorf("a body that is not JSON: %v", err)
	}
}

// get -o yaml shows a document the store serves as its text (YAML only) as written, not as
// one quoted, escaped string; other documents as YAML, separated by ---.
func TestPrintYAMLOfTextDocument(t *testing.T) {
	text := "kind: HostnameGenerator\nmetadata:\n  name: g\nspec:\n  template: {{ name }}.mesh\n"
	quoted, _ := json.Marshal(text)
	var b strings.Builder
	rs := []Resource{{Spec: quoted}, {Spec: json.RawMessage(`{"name":"v","type":"VirtualOutbound"}`)}}
	if err := Print(&b, "yaml", "", rs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if want := text + "---\nname: v\ntype: VirtualOutbound\n"; b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// get -o json of a list is one shape whatever the count - a List, {"total": N, "items":
// [...]}, as the API and kumactl give it - so a script reads .items for 0, 1 or 2 resources
// (it printed null for none, an object for one and an array for two); get TYPE NAME -o json
// is the resource itself.
func TestPrintJSONListShape(t *testing.T) {
	r := Resource{Mesh: "default", Type: "virtualoutbounds", Name: "a", Version: 1, Spec: json.RawMessage(`{"name":"a"}`)}
	for n := range 3 {
		var b strings.Builder
		if err := Print(&b, "json", "", slices.Repeat([]Resource{r}, n), time.Now()); err != nil {
			t.Fatal(err)
		}
		var l List
		if err := json.Unmarshal([]byte(b.String()), &l); err != nil || l.Items == nil || len(l.Items) != n || l.Total != n {
			t.Fatalf("%d resources as JSON: %v\n%s", n, err, b.String())
		}
	}
	var b strings.Builder
	if err := PrintOne(&b, "json", r, time.Now()); err != nil {
		t.Fatal(err)
	}
	var one Resource
	if err := json.Unmarshal([]byte(b.String()), &one); err != nil || one.Name != "a" {
		t.Fatalf("one resource as JSON: %v\n%s", err, b.String())
	}
}
