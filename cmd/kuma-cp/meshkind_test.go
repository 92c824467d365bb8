package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `type: Mesh` is applied as Kuma's users write it: stored, listed by get meshes, given back
// by get mesh NAME, apply saying which of its fields nothing here acts on (it was refused
// with the agent's "a Kuma policy kuma-dp does not act on").
func TestApplyKumaMesh(t *testing.T) {
	srv := dirAPIServer(t, "s3cret")
	dir := t.TempDir()
	token, file := filepath.Join(dir, "token"), filepath.Join(dir, "mesh.yaml")
	os.WriteFile(token, []byte("s3cret"), 0o600)
	os.WriteFile(file, []byte("type: Mesh\nname: default\nmtls:\n  enabledBackend: ca-1\n  backends: [{name: ca-1, type: builtin}]\n"+
		"---\napiVersion: kuma.io/v1alpha1\nkind: Mesh\nmetadata: {name: prod}\nspec:\n  routing: {zoneEgress: true}\n"), 0o644)
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := dispatch(append(args, "--api-url", srv.URL), &out, &errb); rc != exitOK {
			t.Fatalf("kuma-cp %s: exit %d\n%s%s", strings.Join(args, " "), rc, out.String(), errb.String())
		}
		return out.String()
	}
	out := run("apply", "-f", file, "--admin-token-file", token)
	for _, want := range []string{"meshes default/default created (kept as written, not acted on here: mtls)", "meshes prod/prod created (kept as written, not acted on here: routing)"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply lacks %q:\n%s", want, out)
		}
	}
	if out := run("get", "meshes"); !strings.Contains(out, "default") || !strings.Contains(out, "prod") {
		t.Errorf("get meshes:\n%s", out)
	}
	if out := run("get", "mesh", "prod", "-o", "yaml"); !strings.Contains(out, "zoneEgress: true") || !strings.Contains(out, "kind: Mesh") {
		t.Errorf("get mesh prod -o yaml:\n%s", out)
	}
}
