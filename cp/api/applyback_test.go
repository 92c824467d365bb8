package api

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// What get -o json prints - a list, or one resource, in the API's form - is applied back
// as "unchanged", a document that is YAML only (served as its text) included; a file that
// only looks like it (a Kubernetes list) is read as it always was.
func TestApplyBackJSONOutput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(handWritten), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := dirAPI(t, dir)
	ctx := context.Background()
	var all []Resource
	for _, typ := range []string{"dataplanes", "hostnamegenerators", "virtualoutbounds"} {
		rs, err := cl.List(ctx, "default", typ)
		if err != nil || len(rs) != 1 {
			t.Fatalf("list %s: %v %v", typ, rs, err)
		}
		all = append(all, rs...)
	}
	var list bytes.Buffer
	if err := Print(&list, "json", "", all, time.Now()); err != nil {
		t.Fatal(err)
	}
	check := func(what string, data []byte, n int) {
		t.Helper()
		applied, err := cl.Apply(ctx, what, data)
		if err != nil || len(applied) != n {
			t.Fatalf("%s applied back: %+v %v", what, applied, err)
		}
		for _, a := range applied {
			if a.Result != "unchanged" {
				t.Errorf("%s applied back: %s %s/%s %s", what, a.Type, a.Mesh, a.Name, a.Result)
			}
		}
	}
	check("list.json", list.Bytes(), 3)
	for _, r := range all {
		var one bytes.Buffer
		if err := PrintOne(&one, "json", r, time.Now()); err != nil {
			t.Fatal(err)
		}
		check(r.Name+".json", one.Bytes(), 1)
	}
	k8sList := []byte(`{"kind": "List", "items": [{"type": "Dataplane", "mesh": "default", "name": "payments-1", "networking": {"address": "10.0.6.1", "inbound": [{"port": 8080, "tags": {"kuma.io/service": "payments", "version": "10"}}]}}]}`)
	if got := fromAPIForm(k8sList); !bytes.Equal(got, k8sList) {
		t.Errorf("a Kubernetes list was taken for the API's form: %s", got)
	}
}
