package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kumaMeshes = `type: Mesh
name: default
mtls:
  enabledBackend: ca-1
  backends:
  - name: ca-1
    type: builtin
metrics:
  enabledBackend: prometheus-1
  backends:
  - name: prometheus-1
    type: prometheus
---
apiVersion: kuma.io/v1alpha1
kind: Mesh
metadata:
  name: prod
spec:
  routing:
    zoneEgress: true
`

// Kuma's Mesh, as its users write it (both forms), is accepted: its own mesh, what it sets
// kept and named (none of it acted on), a mesh.yaml beside the policies loads with them
// (it was refused as "a Kuma policy kuma-dp does not act on").
func TestKumaMeshAccepted(t *testing.T) {
	rs, err := Decode("mesh.yaml", []byte(kumaMeshes))
	if err != nil || len(rs) != 2 {
		t.Fatalf("decode: %v %v", rs, err)
	}
	def, prod := rs[0].(*Mesh), rs[1].(*Mesh)
	if def.Mesh != "default" || prod.Mesh != "prod" || prod.Name != "prod" {
		t.Errorf("a Mesh's mesh is itself: %+v %+v", def.Meta, prod.Meta)
	}
	if got := strings.Join(def.KeptFields(), ","); got != "mtls,metrics" {
		t.Errorf("default keeps %s, want mtls,metrics", got)
	}
	if got := strings.Join(prod.KeptFields(), ","); got != "routing" {
		t.Errorf("prod keeps %s, want routing", got)
	}
	_, err = Decode("bad.yaml", []byte("type: Mesh\nname: a\nmesh: b\n"))
	if err == nil || !strings.Contains(err.Error(), `a Mesh is the mesh "a"`) {
		t.Errorf("a Mesh of another mesh: %v", err)
	}
	_, err = Decode("typo.yaml", []byte("type: Mesh\nname: a\nmtsl: {}\n"))
	if err == nil || !strings.Contains(err.Error(), "mtsl") {
		t.Errorf("a misspelt field: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(kumaMeshes), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("../testdata/mesh/dataplane.yaml", dir); err != nil {
		t.Errorf("a directory with mesh.yaml: %v", err)
	}
}

// A Kuma kind that is not read names the kinds that are, Router and Route included.
func TestKumaOnlyKindNamesTheKindsRead(t *testing.T) {
	_, err := Decode("tp.yaml", []byte("type: TrafficPermission\nname: all\nmesh: default\n"))
	if err == nil {
		t.Fatal("a TrafficPermission was accepted")
	}
	for _, want := range []string{"a Kuma policy kuma-dp does not act on", "Router", "Route,", "Mesh (kept, not acted on)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: lacks %q", err, want)
		}
	}
}
