package gui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/dirstore"
)

// A mesh of 10,000 dataplanes (100 services, half of the agents connected) opens its
// dataplane list, through the GUI, the API and the store (a directory), in well under a
// second: a page reads its 50 dataplanes and the count, never the whole list. The filtered
// lists read every dataplane once (to count the matches) and are shown beside it.
//
//	go test -run '^$' -bench DataplaneList10k -benchtime 20x ./cp/gui
func BenchmarkDataplaneList10k(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	var doc strings.Builder
	var online []api.Agent
	for i := range n {
		name := fmt.Sprintf("dp-%05d", i)
		fmt.Fprintf(&doc, "---\ntype: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n      version: v%d\n",
			name, i>>16&255, i>>8&255, i&255, i%100, i%3)
		if i%2 == 0 {
			online = append(online, api.Agent{Mesh: "default", Name: name, Replicas: []string{"replica-1"}})
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "dataplanes.yaml"), []byte(doc.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	var vos strings.Builder // 20 policies of 2 selectors each, for the policies page
	for i := range 20 {
		fmt.Fprintf(&vos, "---\ntype: VirtualOutbound\nmesh: default\nname: vo-%d\nselectors:\n- match:\n    kuma.io/service: svc-%d\n- match:\n    version: v%d\nconf:\n  host: '{{.service}}.vo%d.mesh'\n  port: '80'\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n", i, i, i%3, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte(vos.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := dirstore.NewStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	srv := &api.Server{Store: st, Agents: func() []api.Agent { return online }}
	h := New(srv.Handler(), "bench", nil).Handler()
	for _, c := range []struct{ name, path, want string }{
		{"first page", "/gui/meshes/default/dataplanes", `data-name="dp-`},
		{"status=online", "/gui/meshes/default/dataplanes?status=online", `data-name="dp-`},
		{"service=svc-42", "/gui/meshes/default/dataplanes?service=svc-42", `data-name="dp-`},
		// the policies page counts 40 selectors' dataplanes in one pass over the mesh's
		{"policies", "/gui/meshes/default/policies", `data-policy="vo-19"`},
		// a dataplane's page reads the whole mesh: its view is computed from every resource
		{"a dataplane's page", "/gui/meshes/default/dataplanes/dp-00042", `svc-42.mesh`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), c.want) {
					b.Fatalf("%d\n%s", rec.Code, rec.Body.String())
				}
			}
		})
	}
}
