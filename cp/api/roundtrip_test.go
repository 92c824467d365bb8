package api

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// Kuma's forms that the internal form writes otherwise: a TrafficRoute's split (a list of
// destinations internally) with its load balancer, a TrafficRoute's single destination and
// HTTP rules, a HostnameGenerator selecting by matchLabels (a targetRef internally), a
// MeshExternalService and a Dataplane in the Kubernetes form, a Dataplane with every field
// of Kuma's universal form, Kuma's Mesh in both forms (kept, not acted on).
const kumaForms = `apiVersion: kuma.io/v1alpha1
kind: TrafficRoute
mesh: default
metadata:
  name: backend-canary
spec:
  sources:
    - match:
        kuma.io/service: frontend_kuma-demo_svc_8080
  destinations:
    - match:
        kuma.io/service: backend_kuma-demo_svc_3001
  conf:
    split:
      - weight: 90
        destination:
          kuma.io/service: backend_kuma-demo_svc_3001
          version: v1
      - weight: 10
        destination:
          kuma.io/service: backend_kuma-demo_svc_3001
          version: v2
    loadBalancer:
      leastRequest:
        choiceCount: 4
---
type: TrafficRoute
name: route-all-default
mesh: default
sources:
  - match:
      kuma.io/service: '*'
destinations:
  - match:
      kuma.io/service: '*'
conf:
  loadBalancer:
    roundRobin: {}
  destination:
    kuma.io/service: '*'
---
type: TrafficRoute
name: api-routes
mesh: default
sources:
  - match:
      kuma.io/service: '*'
destinations:
  - match:
      kuma.io/service: backend
conf:
  http:
  - match:
      method:
        exact: GET
      path:
        prefix: /api
    modify:
      path:
        rewritePrefix: /v2/api
      requestHeaders:
        add:
        - name: x-routed
          value: "yes"
    split:
    - weight: 90
      destination:
        kuma.io/service: backend
        version: v2
    - weight: 10
      destination:
        kuma.io/service: backend
        version: v1
  destination:
    kuma.io/service: backend
---
apiVersion: kuma.io/v1alpha1
kind: HostnameGenerator
metadata:
  name: by-zone
  namespace: kuma-system
  labels:
    kuma.io/mesh: default
spec:
  selector:
    meshExternalService:
      matchLabels:
        kuma.io/origin: zone
  template: '{{ .DisplayName }}.{{ .Namespace }}.extsvc.mesh.local'
---
apiVersion: kuma.io/v1alpha1
kind: MeshExternalService
metadata:
  name: payments
  namespace: kuma-demo
  labels:
    kuma.io/mesh: default
spec:
  match:
    type: HostnameGenerator
    port: 443
    protocol: tcp
  endpoints:
    - address: api.payments.example.com
      port: 443
  tls:
    enabled: true
    verification:
      serverName: api.payments.example.com
---
apiVersion: kuma.io/v1alpha1
kind: Dataplane
mesh: default
metadata:
  name: web-7d9f8c5b4
  namespace: kuma-demo
spec:
  networking:
    address: 10.42.0.13
    inbound:
      - port: 8080
        tags:
          kuma.io/service: web_kuma-demo_svc_8080
          kuma.io/protocol: http
---
type: Dataplane
mesh: default
name: gw-1
labels:
  team: edge
networking:
  address: 10.42.0.14
  advertisedAddress: 192.0.2.14
  admin:
    port: 9901
  gateway:
    type: BUILTIN
    tags:
      kuma.io/service: edge-gateway
  transparentProxying:
    redirectPortInbound: 15006
    redirectPortOutbound: 15001
    reachableServices: [backend]
metrics:
  type: prometheus
  conf:
    port: 5670
    path: /metrics
probes:
  port: 9000
---
type: Mesh
name: default
mtls:
  enabledBackend: ca-1
  backends:
  - name: ca-1
    type: builtin
networking:
  outbound:
    passthrough: false
---
apiVersion: kuma.io/v1alpha1
kind: Mesh
metadata:
  name: prod
spec:
  routing:
    zoneEgress: true
`

// Every Kuma form accepted, applied, comes back from get -o yaml as the document applied
// (the same fields and values; the internal form used to be stored and returned: a
// TrafficRoute's split as conf: [{destination, weight}], a HostnameGenerator's matchLabels
// as targetRef), on etcd and on a directory; the stored document is the one applied.
func TestKumaFormsRoundTrip(t *testing.T) {
	files := map[string][]byte{"kuma-forms.yaml": []byte(kumaForms)}
	for _, dir := range []string{"../../testdata/mesh/policies", "../../testdata/kuma"} {
		paths, errs := mesh.ResourceFiles(dir)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.Base(p)] = bytes.ReplaceAll(data, []byte("NAME"), []byte("web-1"))
		}
	}
	_, _, onEtcd := startAPI(t)
	for store, cl := range map[string]*Client{"etcd": onEtcd, "dir": dirAPI(t, t.TempDir())} {
		t.Run(store, func(t *testing.T) {
			for name, data := range files {
				roundTrip(t, cl, name, data)
			}
		})
	}
}

// roundTrip applies a file and checks that get -o yaml of each of its resources gives the
// document applied, and that applying it again changes nothing.
func roundTrip(t *testing.T, cl *Client, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	applied, err := cl.Apply(ctx, name, data)
	if err != nil {
		t.Fatalf("%s: apply: %v", name, err)
	}
	docs, err := mesh.Documents(data)
	if err != nil || len(docs) != len(applied) {
		t.Fatalf("%s: %d documents (%v) for %d applied", name, len(docs), err, len(applied))
	}
	for i, a := range applied {
		r, err := cl.Get(ctx, a.Mesh, a.Type, a.Name)
		if err != nil {
			t.Fatalf("%s: get %s %s: %v", name, a.Type, a.Name, err)
		}
		var out bytes.Buffer
		if err := PrintOne(&out, "yaml", r, time.Now()); err != nil {
			t.Fatal(err)
		}
		want, err1 := mesh.DocumentJSON(docs[i])
		got, err2 := mesh.DocumentJSON(out.Bytes())
		if err1 != nil || err2 != nil || !bytes.Equal(canonJSON(got), canonJSON(want)) {
			t.Errorf("%s: %s %s: get -o yaml gives\n%s\nwant the document applied:\n%s%v%v", name, a.Type, a.Name, out.Bytes(), docs[i], nz(err1), nz(err2))
		}
	}
	again, err := cl.Apply(ctx, name, data)
	if err != nil {
		t.Fatalf("%s: apply again: %v", name, err)
	}
	for _, a := range again {
		if a.Result != "unchanged" {
			t.Errorf("%s: applied again: %s %s/%s %s", name, a.Type, a.Mesh, a.Name, a.Result)
		}
	}
}

func nz(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" (%v)", strings.TrimSpace(err.Error()))
}
