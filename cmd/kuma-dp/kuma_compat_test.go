package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Issue-by-issue compatibility with Kuma, on files written as a Kuma user writes them (Kuma's
// universal form, conf.parameters, HostnameGenerator with selector.meshExternalService),
// through `kuma-dp vips` as a user runs it: decoding, validation and allocation together.
// docs/kuma-compatibility.md lists these and the deliberate differences.

// kumaSelf carries every field of Kuma's universal Dataplane, those the agent acts on and
// those it only keeps (advertisedAddress, servicePort, transparentProxying's reachable lists,
// metrics, probes).
const kumaSelf = `type: Dataplane
mesh: default
name: web-1
labels:
  team: a
networking:
  address: 10.0.0.1
  advertisedAddress: 192.168.0.1
  inbound:
  - port: 8080
    servicePort: 18080
    serviceAddress: 127.0.0.1
    address: 10.0.0.1
    tags:
      kuma.io/service: web
      kuma.io/zone: zone-1
      kuma.io/protocol: http
      region: eu
  outbound:
  - port: 33033
    address: 127.0.0.1
    tags:
      kuma.io/service: db
  transparentProxying:
    redirectPortInbound: 15006
    redirectPortOutbound: 15001
    directAccessServices: ["*"]
    reachableServices: ["db", "api", "sidecar-only", "infra"]
    ipFamilyMode: DualStack
    reachableBackends:
      refs:
      - kind: MeshService
        name: db
metrics:
  type: prometheus
  conf:
    port: 5670
    path: /metrics
probes:
  port: 9000
  endpoints:
  - inboundPort: 8080
    inboundPath: /healthz
    path: /8080/healthz
`

// kumaMesh: dataplanes with and without a port tag, two api instances on different ports,
// an Ignored inbound, one on a reserved port, Kuma's extra Dataplane fields; VirtualOutbounds
// in Kuma's form; a HostnameGenerator with {{ .Namespace }} and {{ .Zone }}; a
// MeshExternalService without match.type, with serverName and endpoint priorities.
const kumaMesh = `type: Dataplane
mesh: default
name: db-1
networking:
  address: 10.0.0.2
  inbound:
  - port: 5432
    tags:
      kuma.io/service: db
      port: "5432"
      region: eu
---
type: Dataplane
mesh: default
name: api-1
networking:
  address: 10.0.0.3
  inbound:
  - port: 8080
    tags:
      kuma.io/service: api
      port: "8080"
---
type: Dataplane
mesh: default
name: api-2
networking:
  address: 10.0.0.4
  inbound:
  - port: 9090
    tags:
      kuma.io/service: api
      port: "9090"
---
type: Dataplane
mesh: default
name: side-1
networking:
  address: 10.0.0.5
  admin:
    port: 9901
  inbound:
  - port: 8080
    name: http
    state: Ignored
    health:
      ready: false
    serviceProbe:
      tcp: {}
    tags:
      kuma.io/service: sidecar-only
  - port: 49151
    tags:
      kuma.io/service: infra
metrics:
  type: prometheus
probes:
  port: 9000
---
type: VirtualOutbound
mesh: default
name: unused-param
selectors:
- match:
    kuma.io/service: "*"
conf:
  host: "{{.service}}.svc"
  port: "80"
  parameters:
  - name: service
    tagKey: kuma.io/service
  - name: port
---
type: VirtualOutbound
mesh: default
name: tolerant
selectors:
- match:
    kuma.io/service: "*"
conf:
  host: "{{.service}}.tolerant"
  port: "{{if .port}}{{.port}}{{else}}8080{{end}}"
  parameters:
  - name: service
    tagKey: kuma.io/service
  - name: port
---
type: VirtualOutbound
mesh: default
name: needs-port
selectors:
- match:
    kuma.io/service: "*"
conf:
  host: "{{.service}}.needs"
  port: "{{.port}}"
  parameters:
  - name: service
    tagKey: kuma.io/service
  - name: port
---
type: VirtualOutbound
mesh: default
name: literal
selectors:
- match:
    kuma.io/service: web
conf:
  host: foo.mesh
  port: "80"
  parameters:
  - name: service
    tagKey: kuma.io/service
  - name: port
---
type: VirtualOutbound
mesh: default
name: across-services
selectors:
- match:
    region: eu
conf:
  host: "{{.service}}.eu.mesh"
  port: "80"
  parameters:
  - name: service
    tagKey: kuma.io/service
---
type: HostnameGenerator
name: ns-zone
spec:
  selector:
    meshExternalService:
      matchLabels:
        access: "yes"
  template: "{{ .DisplayName }}.{{ .Namespace }}.{{ .Zone }}.ext"
---
type: MeshExternalService
mesh: default
name: payments-api
labels:
  access: "yes"
  k8s.kuma.io/namespace: payments
spec:
  match:
    port: 443
    protocol: tcp
  endpoints:
  - address: primary.example.com
    port: 443
    priority: 0
  - address: backup.example.com
    port: 443
    priority: 1
  tls:
    enabled: true
    verification:
      serverName: api.example.com
`

// kumaVIPs writes self and kumaMesh and returns `kuma-dp vips -o json` of them, with the
// files' paths.
func kumaVIPs(t *testing.T, self string) (v vipsJSON, dpFile, policies string) {
	t.Helper()
	dir := t.TempDir()
	dpFile, policies = filepath.Join(dir, "dataplane.yaml"), filepath.Join(dir, "policies")
	writeFile(t, dpFile, self)
	writeFile(t, filepath.Join(policies, "mesh.yaml"), kumaMesh)
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", policies, "-o", "json")
	if code != exitOK {
		t.Fatalf("Kuma-form files refused (exit %d):\n%s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v, dpFile, policies
}

func TestKumaFormThroughVIPs(t *testing.T) {
	v, _, _ := kumaVIPs(t, kumaSelf)
	served := map[string][]uint32{}
	for _, e := range v.Entries {
		if e.Status == "Available" && e.IPv4 != "" {
			served[e.Hostname] = e.Ports
		}
	}
	for host, ports := range map[string][]uint32{
		"web.svc": {80}, "db.svc": {80}, "api.svc": {80}, // an unused parameter skips nobody
		"web.tolerant": {8080}, "db.tolerant": {5432}, // {{if .port}}...{{else}}8080{{end}}
		"db.needs":    {5432},                   // only a template that needs the value skips
		"foo.mesh":    {80},                     // a literal host is never skipped for an unused parameter
		"api.needs":   {8080, 9090},             // two dataplanes, one name, both ports
		"web.eu.mesh": {80}, "db.eu.mesh": {80}, // {region: eu} selects across services
		"payments-api.payments.zone-1.ext": {443}, // {{ .Namespace }}, {{ .Zone }} falls back to the local zone
	} {
		got, ok := served[host]
		if !ok {
			t.Errorf("%s not served", host)
			continue
		}
		if !slices.Equal(got, ports) {
			t.Errorf("%s: ports %v, want %v", host, got, ports)
		}
	}
	for _, host := range []string{"web.needs", "sidecar-only.mesh", "infra.mesh", "sidecar-only.svc", "infra.svc"} {
		if _, ok := served[host]; ok {
			t.Errorf("%s served: Kuma gives it no name (a needed tag missing, an Ignored inbound, a reserved port)", host)
		}
	}
	if t.Failed() {
		t.Logf("served: %v", served)
	}
}

// Kuma's reachableServices: only the listed services (and the dataplane's own) get names
// and VIPs; the other services' dataplanes are not kept at all.
func TestKumaReachableServices(t *testing.T) {
	v, dpFile, policies := kumaVIPs(t, strings.Replace(kumaSelf, `reachableServices: ["db", "api", "sidecar-only", "infra"]`, `reachableServices: ["db"]`, 1))
	served := map[string]bool{}
	for _, e := range v.Entries {
		served[e.Hostname] = true
	}
	for _, host := range []string{"db.mesh", "db.svc", "db.needs", "db.eu.mesh", "web.mesh", "web.svc"} {
		if !served[host] {
			t.Errorf("%s not served: db is reachable, web is the dataplane's own service", host)
		}
	}
	for _, host := range []string{"api.mesh", "api.svc", "api.needs"} {
		if served[host] {
			t.Errorf("%s served: api is not in reachableServices", host)
		}
	}

	writeFile(t, dpFile, strings.Replace(kumaSelf, `reachableServices: ["db", "api", "sidecar-only", "infra"]`, `reachableServices: ["db", ""]`, 1))
	code, _, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", policies)
	if code != exitInvalid || !strings.Contains(errOut, "networking.transparentProxying.reachableServices[1]: empty service name") {
		t.Errorf("an empty reachable service: exit %d, %s", code, errOut)
	}
}

// Kuma's parameter rules, each refused naming its field, and every error of a
// MeshExternalService at once, through `kuma-dp vips`.
func TestKumaFormRefusals(t *testing.T) {
	vo := func(name, params string) string {
		return "type: VirtualOutbound\nmesh: default\nname: " + name + "\nselectors:\n- match:\n    kuma.io/service: \"*\"\n" +
			"conf:\n  host: \"{{.service}}.x.mesh\"\n  port: \"80\"\n  parameters:\n" + params
	}
	files := map[string]string{
		"bad-tagkey.yaml": vo("bad-tagkey", "  - name: service\n    tagKey: kuma.io/service\n  - name: stars\n    tagKey: \"***\"\n"),
		"bad-name.yaml":   vo("bad-name", "  - name: service\n    tagKey: kuma.io/service\n  - name: _\n"),
		"slash-name.yaml": vo("slash-name", "  - name: service\n    tagKey: kuma.io/service\n  - name: kuma.io/port\n"),
		"no-service.yaml": vo("no-service", "  - name: service\n    tagKey: version\n"),
		"mes-errors.yaml": "type: MeshExternalService\nname: m\nmesh: default\nspec:\n  match:\n    port: 443\n  endpoints:\n  - address: example.com\n    port: 443\n  tls:\n    enabled: true\n    verification:\n      clientCert:\n        inline: '!!not base64'\n",
	}
	dir := t.TempDir()
	dpFile := filepath.Join(dir, "dataplane.yaml")
	writeFile(t, dpFile, kumaSelf)
	for name, body := range files {
		writeFile(t, filepath.Join(dir, "policies", name), body)
	}
	code, _, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", filepath.Join(dir, "policies"))
	if code != exitInvalid {
		t.Fatalf("exit %d, want %d:\n%s", code, exitInvalid, errOut)
	}
	for _, want := range []string{
		`virtualoutbound "bad-tagkey": conf.parameters[1].tagKey`,
		`virtualoutbound "bad-name": conf.parameters[1].name`,
		`virtualoutbound "slash-name": conf.parameters[1].name`,
		`virtualoutbound "no-service": conf.parameters`,
		"spec.tls.verification.clientCert.inline: not base64-encoded text",
		"spec.tls.verification.clientKey: required with clientCert",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("errors lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("errors:\n%s", errOut)
	}
	_ = os.Remove(dpFile)
}
