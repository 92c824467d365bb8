package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testStore(t *testing.T, validate bool) (*store, string, *bytes.Buffer) {
	dir := t.TempDir()
	var logs bytes.Buffer
	return newStore(dir, validate, slog.New(slog.NewTextHandler(&logs, nil))), dir, &logs
}

func put(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := writeFileAtomic(filepath.Join(dir, name), body); err != nil {
		t.Fatal(err)
	}
}

// The store lays resources out by mesh and kind; meshless HostnameGenerators go to every
// mesh; ConfigMap "..data" entries are skipped.
func TestStoreLayout(t *testing.T) {
	st, dir, _ := testStore(t, true)
	put(t, dir, "a.yaml", dpWeb+"---\n"+dpOther)
	put(t, dir, "hg.yaml", `type: HostnameGenerator
name: everywhere
spec:
  targetRef:
    kind: MeshExternalService
  template: "{{ name }}.ext"
`)
	if err := os.MkdirAll(filepath.Join(dir, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	put(t, dir, "..data/a.yaml", dpWeb)
	sv, changed := st.scan()
	if !changed {
		t.Fatal("first scan: no change")
	}
	if _, ok := sv.forMesh("default", "Dataplane")["web-1"]; !ok {
		t.Error("web-1 not in mesh default")
	}
	if _, ok := sv.forMesh("default", "Dataplane")["secret-1"]; ok {
		t.Error("secret-1 of mesh other served to mesh default")
	}
	for _, m := range []string{"default", "other", "a-mesh-with-no-resources"} {
		if _, ok := sv.forMesh(m, "HostnameGenerator")["everywhere"]; !ok {
			t.Errorf("the meshless HostnameGenerator is not served to mesh %s", m)
		}
	}
	if sv.count() != 3 {
		t.Errorf("count %d, want 3", sv.count())
	}
	if _, changed := st.scan(); changed {
		t.Error("a scan with nothing changed reports a change")
	}
}

// A file that fails validation is refused whole, logged with file and field, and its last
// good version is served; a duplicate name is logged and the first file wins.
func TestStoreRefusesInvalidFileKeepsLastGood(t *testing.T) {
	st, dir, logs := testStore(t, true)
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh"))
	sv, _ := st.scan()
	before := string(sv.forMesh("default", "VirtualOutbound")["by-version"])
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service"))
	sv, changed := st.scan()
	if !changed {
		t.Fatal("the edit was not seen")
	}
	if got := string(sv.forMesh("default", "VirtualOutbound")["by-version"]); got != before {
		t.Errorf("the broken version is served:\n%s", got)
	}
	line := lineWith(logs.String(), "refused a file")
	if !strings.Contains(line, "vo.yaml") || !strings.Contains(line, "conf.host") {
		t.Errorf("refusal does not name file and field: %s", line)
	}
	put(t, dir, "zz-dup.yaml", virtualOutbound("default", "{{service}}.dup.mesh"))
	sv, _ = st.scan()
	if got := string(sv.forMesh("default", "VirtualOutbound")["by-version"]); got != before {
		t.Errorf("the duplicate replaced the first:\n%s", got)
	}
	if !strings.Contains(lineWith(logs.String(), "duplicate resource"), "zz-dup.yaml") {
		t.Errorf("duplicate not logged with its file:\n%s", logs)
	}
}

// Without validation the broken document is served as written, for agents to judge.
func TestStoreSkipValidationServesAsWritten(t *testing.T) {
	st, dir, _ := testStore(t, false)
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service"))
	sv, _ := st.scan()
	body := sv.forMesh("default", "VirtualOutbound")["by-version"]
	if !bytes.Contains(body, []byte(`{{version}}.{{service`)) {
		t.Fatalf("not served as written: %s", body)
	}
}
