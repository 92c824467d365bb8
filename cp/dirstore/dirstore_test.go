package dirstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

func testStore(t *testing.T, validate bool) (*Dir, string, *bytes.Buffer) {
	dir := t.TempDir()
	var logs bytes.Buffer
	return New(dir, validate, slog.New(slog.NewTextHandler(&logs, nil))), dir, &logs
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
	sv, changed := st.Scan()
	if !changed {
		t.Fatal("first scan: no change")
	}
	if _, ok := sv.ForMesh("default", "Dataplane")["web-1"]; !ok {
		t.Error("web-1 not in mesh default")
	}
	if _, ok := sv.ForMesh("default", "Dataplane")["secret-1"]; ok {
		t.Error("secret-1 of mesh other served to mesh default")
	}
	for _, m := range []string{"default", "other", "a-mesh-with-no-resources"} {
		if _, ok := sv.ForMesh(m, "HostnameGenerator")["everywhere"]; !ok {
			t.Errorf("the meshless HostnameGenerator is not served to mesh %s", m)
		}
	}
	if sv.Count() != 3 {
		t.Errorf("count %d, want 3", sv.Count())
	}
	if _, changed := st.Scan(); changed {
		t.Error("a scan with nothing changed reports a change")
	}
}

// A file that fails validation is refused whole, logged with file and field, and its last
// good version is served; a duplicate name is logged and the first file wins.
func TestStoreRefusesInvalidFileKeepsLastGood(t *testing.T) {
	st, dir, logs := testStore(t, true)
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh"))
	sv, _ := st.Scan()
	before := string(sv.ForMesh("default", "VirtualOutbound")["by-version"])
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service"))
	sv, changed := st.Scan()
	if !changed {
		t.Fatal("the edit was not seen")
	}
	if got := string(sv.ForMesh("default", "VirtualOutbound")["by-version"]); got != before {
		t.Errorf("the broken version is served:\n%s", got)
	}
	line := testutil.LineWith(logs.String(), "refused a file")
	if !strings.Contains(line, "vo.yaml") || !strings.Contains(line, "conf.host") {
		t.Errorf("refusal does not name file and field: %s", line)
	}
	put(t, dir, "zz-dup.yaml", virtualOutbound("default", "{{service}}.dup.mesh"))
	sv, _ = st.Scan()
	if got := string(sv.ForMesh("default", "VirtualOutbound")["by-version"]); got != before {
		t.Errorf("the duplicate replaced the first:\n%s", got)
	}
	if !strings.Contains(testutil.LineWith(logs.String(), "duplicate resource"), "zz-dup.yaml") {
		t.Errorf("duplicate not logged with its file:\n%s", logs)
	}
}

// Without validation the broken document is served as written, for agents to judge.
func TestStoreSkipValidationServesAsWritten(t *testing.T) {
	st, dir, _ := testStore(t, false)
	put(t, dir, "vo.yaml", virtualOutbound("default", "{{version}}.{{service"))
	sv, _ := st.Scan()
	body := sv.ForMesh("default", "VirtualOutbound")["by-version"]
	if !bytes.Contains(body, []byte(`{{version}}.{{service`)) {
		t.Fatalf("not served as written: %s", body)
	}
}

// writeFileAtomic writes through a rename, as editors and ConfigMap updates do.
func writeFileAtomic(path, body string) error {
	if err := os.WriteFile(path+".tmp~", []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp~", path)
}

// Fixtures (the same resources the kuma-cp end-to-end tests serve).

const dpWeb = `type: Dataplane
mesh: default
name: web-1
networking:
  address: 10.0.0.1
  inbound:
    - port: 8080
      tags:
        kuma.io/service: web
`

// dpOther lives in another mesh: no agent of mesh default may learn of it.
const dpOther = `type: Dataplane
mesh: other
name: secret-1
networking:
  address: 10.9.0.1
  inbound:
    - port: 80
      tags:
        kuma.io/service: secret
        version: v1
`

func virtualOutbound(meshName, host string) string {
	return fmt.Sprintf(`type: VirtualOutbound
mesh: %s
name: by-version
selectors:
  - match:
      kuma.io/service: "*"
      version: "*"
conf:
  host: %q
  port: 8080
  tags:
    kuma.io/service: service
    version: version
`, meshName, host)
}

var dnsZoneFile = testutil.GeneratingZone()

// A DNSZone is only ever the control plane's own: a file of the resources directory holding
// one is refused (logged with the file and the kind), also with --skip-validation, so no
// agent is sent a zone a user wrote; the file's other resources are served as before.
func TestStoreNeverServesADNSZoneFile(t *testing.T) {
	for _, validate := range []bool{true, false} {
		st, dir, logs := testStore(t, validate)
		put(t, dir, "web.yaml", dpWeb)
		put(t, dir, "zone.yaml", dnsZoneFile)
		put(t, dir, "both.yaml", dpOther+"---\n"+dnsZoneFile)
		sv, _ := st.Scan()
		for _, m := range []string{"default", "other"} {
			if z := sv.ForMesh(m, "DNSZone"); len(z) != 0 {
				t.Errorf("validate=%v: mesh %s is served a DNSZone from a file: %s", validate, m, z["evil.test"])
			}
		}
		if _, ok := sv.ForMesh("default", "Dataplane")["web-1"]; !ok {
			t.Errorf("validate=%v: web-1 not served", validate)
		}
		line := testutil.LineWith(logs.String(), "zone.yaml")
		if !strings.Contains(line, "DNSZone") || !strings.Contains(line, "control plane") {
			t.Errorf("validate=%v: the refusal does not name the file and the kind:\n%s", validate, logs)
		}
	}
}
