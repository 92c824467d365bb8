package api

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/dirstore"
)

// A hand-written file as a directory store holds it: the Kubernetes form, a comment, a tag
// value written as a number, beside a document in the plain form.
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

// Applying the very files a directory store serves says "unchanged" for each resource and
// leaves the files byte for byte (it used to say "updated" and rewrite every document not
// in the canonical form, comments gone); a real change is still "updated".
func TestApplyUnchangedOnHandWrittenDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(file, []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := dirstore.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{Store: st, AdminToken: token}).Handler())
	t.Cleanup(srv.Close)
	cl := NewClient(srv.URL, token)
	ctx := context.Background()

	applied, err := cl.Apply(ctx, "mesh.yaml", []byte(handWritten))
	if err != nil || len(applied) != 2 {
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
	if err != nil || len(applied) != 2 || applied[0].Result != "updated" || applied[1].Result != "unchanged" {
		t.Fatalf("apply a changed address: %+v %v", applied, err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "10.0.6.2") || !strings.Contains(string(b), `host: "{{.version}}.{{.service}}.mesh"`) {
		t.Fatalf("after the change:\n%s", b)
	}
}
