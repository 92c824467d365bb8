package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The small mesh the end-to-end tests of the agent, the control plane and its directory
// store serve: web-1 and httpbin-1 in mesh default, secret-1 in mesh other, and a
// VirtualOutbound naming <version>.<service>.

// DataplaneWeb is web-1 in mesh default (kuma.io/service web on 10.0.0.1:8080).
const DataplaneWeb = `type: Dataplane
mesh: default
name: web-1
networking:
  address: 10.0.0.1
  inbound:
    - port: 8080
      tags:
        kuma.io/service: web
`

// DataplaneHTTPBin is httpbin-1 in mesh default (httpbin version v1 on 10.0.0.2:80).
const DataplaneHTTPBin = `type: Dataplane
mesh: default
name: httpbin-1
networking:
  address: 10.0.0.2
  inbound:
    - port: 80
      tags:
        kuma.io/service: httpbin
        version: v1
`

// DataplaneOther is secret-1 in mesh other: no agent of mesh default may learn of it.
const DataplaneOther = `type: Dataplane
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

// VirtualOutbound is the VirtualOutbound by-version of mesh: host (a template over service
// and version) on port 8080 for every dataplane with a version tag.
func VirtualOutbound(mesh, host string) string {
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
`, mesh, host)
}

// TempFiles is a writer of files into a new temporary directory (removed when the test
// ends): each call writes body as name there (WriteFile) and returns its path.
func TempFiles(t testing.TB) func(name, body string) string {
	dir := t.TempDir()
	return func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		WriteFile(t, p, body)
		return p
	}
}

// WriteFile writes body to path (making its directory) through a rename, as editors and
// ConfigMap updates do: a watcher never reads half a file.
func WriteFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
