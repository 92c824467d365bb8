package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Kuma 2.x's MeshServices, HostnameGenerators and route policies (Kuma's documented
// examples) applied with `kuma-cp apply`, in each form, reach an agent over the link: it
// answers the MeshServices' names with VIPs from 241.0.0.0/8 and gives its Envoy the
// MeshService listeners and the merged routes.
func TestE2EApplyKuma2ToAgents(t *testing.T) {
	e := newCPEnv(t)
	root := filepath.Join("..", "..", "testdata", "kuma2")
	for _, f := range []string{"dataplane.yaml", filepath.Join("universal", "dataplanes.yaml")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		e.write(filepath.Base(f), string(b))
	}
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start("--admin-token-file", e.path("admin.token"), "--api-address", "127.0.0.1:0")
	a := startAgent(t, e, e.address, true, "--name", "frontend-1", "--mesh", "default",
		"--dataplane-token-file", e.token("frontend-1", "default"), "--envoy=true", "--binary-path", fakeEnvoyBin(t))
	if a.answers("backend.kuma-demo.mesh") {
		t.Fatal("backend.kuma-demo.mesh answered before any MeshService was applied")
	}
	for _, form := range []string{"universal", "kubernetes"} {
		out := e.kumaCP("apply", "-f", filepath.Join(root, form), "--api-url", "http://"+e.api, "--admin-token-file", e.path("admin.token"))
		for _, want := range []string{"meshservices default/backend", "meshhttproutes default/route-to-backend-v2", "meshtcproutes default/tcp-route-1", "hostnamegenerators default/all"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: apply printed no %s:\n%s", form, want, out)
			}
		}
		waitFor(t, form+": the MeshServices' names answered", 10*time.Second, func() bool {
			ips := a.query("backend.kuma-demo.mesh")
			return len(ips) == 1 && strings.HasPrefix(ips[0], "241.") && a.answers("redis.svc.mesh.local")
		})
		var dump string
		waitFor(t, form+": the routes in the agent's Envoy configuration", 10*time.Second, func() bool {
			dump = httpGet(t, a.admin()+"/config_dump")
			return strings.Contains(dump, "route-to-backend-v2/rules[0]/matches[0]") && strings.Contains(dump, "meshservice_redis_16739")
		})
	}
	if out := e.kumaCP("get", "meshservices", "--api-url", "http://"+e.api); !strings.Contains(out, "backend-v2") {
		t.Errorf("get meshservices: %s", out)
	}
}
