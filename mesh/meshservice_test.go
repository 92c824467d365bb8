package mesh

import (
	"strconv"
	"strings"
	"testing"
)

// Kuma 2.x's example mesh (testdata/kuma2) loads in both forms, with the MeshServices,
// HostnameGenerators and route policies of Kuma's documentation read as Kuma reads them.
func TestKuma2ExampleMeshBothForms(t *testing.T) {
	for _, form := range []string{"universal", "kubernetes"} {
		snap, err := Load("../testdata/kuma2/dataplane.yaml", "../testdata/kuma2/"+form)
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if len(snap.MeshServices) != 3 || len(snap.MeshHTTPRoutes) != 4 || len(snap.MeshTCPRoutes) != 1 || len(snap.HostnameGenerators) != 2 {
			t.Fatalf("%s: %d MeshServices, %d MeshHTTPRoutes, %d MeshTCPRoutes, %d HostnameGenerators; want 3, 4, 1, 2", form,
				len(snap.MeshServices), len(snap.MeshHTTPRoutes), len(snap.MeshTCPRoutes), len(snap.HostnameGenerators))
		}
		redis := snap.MeshServices[2]
		if redis.Name != "redis" || redis.Labels()[NamespaceLabel] != "redis-system" {
			t.Errorf("%s: MeshService %s labels %v, want redis in redis-system", form, redis.Name, redis.Labels())
		}
		// targetPort {value: 6739} is the port, {name: ...} an inbound's name.
		if p, n := redis.Spec.Ports[0].Target(); p != 6739 || n != "" {
			t.Errorf("%s: ports[0] targets %d %q, want 6739", form, p, n)
		}
		if p, n := redis.Spec.Ports[1].Target(); p != 0 || n != "target-port-from-container" {
			t.Errorf("%s: ports[1] targets %d %q, want the inbound target-port-from-container", form, p, n)
		}
		var eps []string
		redis.Endpoints(snap.Dataplanes, redis.FindPort("some-port"), func(dp *Dataplane, in *Inbound) {
			eps = append(eps, dp.Name+":"+strconv.FormatUint(uint64(in.Port), 10))
		})
		if strings.Join(eps, ",") != "redis-0:26739" {
			t.Errorf("%s: some-port endpoints %v, want redis-0:26739 (the inbound named target-port-from-container)", form, eps)
		}
		for _, hg := range snap.HostnameGenerators {
			if hg.Spec.TargetRef.Kind != KindMeshService {
				t.Errorf("%s: generator %s selects %s, want MeshService", form, hg.Name, hg.Spec.TargetRef.Kind)
			}
		}
		mirror := snap.MeshHTTPRoutes[2].Spec.To[0].Rules[0]
		if mirror.Matches[0].Headers[0].Value != "true" || mirror.Default.Filters[0].RequestMirror.BackendRef.Tags.Value("version") != "v1_experimental" {
			t.Errorf("%s: http-route-3 read as %+v", form, mirror)
		}
		if pct, err := MirrorPercent(mirror.Default.Filters[0].RequestMirror.Percentage); err != nil || pct != 30 {
			t.Errorf("%s: mirror percentage %v %v, want 30", form, pct, err)
		}
	}
	k8s, err := LoadDir("../testdata/kuma2/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range k8s {
		if ms, ok := r.(*MeshService); ok && ms.Labels()[DisplayNameLabel] != ms.Name {
			t.Errorf("Kubernetes MeshService %s: display name %q, want its metadata.name", ms.Name, ms.Labels()[DisplayNameLabel])
		}
		if rt, ok := r.(*MeshHTTPRoute); ok && rt.Name == "route-to-backend-v2" && rt.Namespace != "kuma-demo" {
			t.Errorf("route-to-backend-v2 namespace %q, want kuma-demo", rt.Namespace)
		}
	}
}

// Every problem of a MeshService, MeshHTTPRoute or MeshTCPRoute is reported at once, at
// Kuma's path, in both forms.
func TestKuma2Errors(t *testing.T) {
	route := `spec:
  targetRef: {kind: MeshGateway, name: gw}
  to:
  - targetRef: {kind: MeshService, name: backend}
    rules:
    - default: {backendRefs: [{kind: MeshService, name: a}]}
    - matches:
      - path: {type: Prefix, value: /api}
        method: FETCH
        queryParams: [{type: Exact, name: ""}]
      default:
        filters:
        - type: RequestHeaderModifier
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
        - type: RequestRedirect
          requestRedirect: {statusCode: 200}
        backendRefs: [{kind: Service, name: b}, {kind: MeshServiceSubset, name: c}]
`
	want := []string{
		`spec.targetRef.kind: must be one of Mesh, MeshSubset, MeshService, MeshServiceSubset, Dataplane (this agent configures the dataplanes it selects) (value "MeshGateway")`,
		`spec.to[0].rules[1].matches[0].path.type: must be one of Exact, PathPrefix, RegularExpression (value "Prefix")`,
		`spec.to[0].rules[1].matches[0].method: must be one of CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, TRACE (value "FETCH")`,
		`spec.to[0].rules[1].matches[0].queryParams[0].name: required`,
		`spec.to[0].rules[1].default.backendRefs[0].kind: must be one of MeshService, MeshServiceSubset, MeshExternalService (value "Service")`,
		`spec.to[0].rules[1].default.backendRefs[1].tags: required for MeshServiceSubset`,
		`spec.to[0].rules[1].default.filters[0].requestHeaderModifier: required for type RequestHeaderModifier`,
		`spec.to[0].rules[1].default.filters[1].urlRewrite.path.type: needs every match of the rule to be a PathPrefix path match (as in Kuma) (value "ReplacePrefixMatch")`,
		`spec.to[0].rules[1].default.filters[2].requestRedirect.statusCode: must be 301, 302, 303, 307 or 308 (value "200")`,
	}
	for _, doc := range []string{
		"type: MeshHTTPRoute\nname: r\nmesh: default\n" + route,
		"apiVersion: kuma.io/v1alpha1\nkind: MeshHTTPRoute\nmetadata:\n  name: r\n  namespace: kuma-system\n" + route,
	} {
		_, err := Decode("f.yaml", []byte(doc))
		if err == nil {
			t.Fatal("no error")
		}
		got := err.Error()
		for _, w := range want {
			if !strings.Contains(got, `f.yaml#1: meshhttproute "r": `+w) {
				t.Errorf("missing %s\nin:\n%s", w, got)
			}
		}
		if n := strings.Count(got, "\n") + 1; n != len(want) {
			t.Errorf("%d errors, want %d:\n%s", n, len(want), got)
		}
	}
	_, err := Decode("f.yaml", []byte(`type: MeshTCPRoute
name: t
spec:
  targetRef: {kind: Mesh, name: all, tags: {a: b}}
  to:
  - targetRef: {kind: Mesh}
    rules: [{default: {backendRefs: [{kind: MeshService, name: x, port: 70000, sectionName: http}]}}, {default: {}}]
  - targetRef: {kind: MeshService, name: y, tags: {version: v1}}
    rules: [{default: {}}]
`))
	for _, w := range []string{
		`meshtcproute "t": spec.to[0].targetRef.kind: must be MeshService or MeshExternalService (a gateway's Mesh is not acted on here) (value "Mesh")`,
		`meshtcproute "t": spec.to[0].rules: exactly one rule (Kuma's MeshTCPRoute has one) (value "2")`,
		`meshtcproute "t": spec.to[0].rules[0].default.backendRefs[0].port: port must be 1-65535 (value "70000")`,
		`meshtcproute "t": spec.to[0].rules[0].default.backendRefs[0].sectionName: a backendRef names its MeshService's port with port (value "http")`,
		`meshtcproute "t": spec.targetRef.tags: only for MeshSubset and MeshServiceSubset`,
		`meshtcproute "t": spec.targetRef.name: not for Mesh (value "all")`,
		`meshtcproute "t": spec.to[1].targetRef.tags: a to[].targetRef names a MeshService: a subset is a backendRef's (kind MeshServiceSubset)`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %s in %v", w, err)
		}
	}
	_, err = Decode("f.yaml", []byte(`type: MeshService
name: s
spec:
  selector: {}
  ports:
  - {port: 80, targetPort: {value: 0}, appProtocol: udp}
  - {port: 80, targetPort: {nme: x}}
`))
	for _, w := range []string{
		`meshservice "s": spec.selector: required: dataplaneTags, dataplaneRef or dataplaneLabels`,
		`meshservice "s": spec.ports[0].targetPort.value: port must be 1-65535 (value "0")`,
		`meshservice "s": spec.ports[0].appProtocol: must be one of tcp, http, http2, grpc, kafka (value "udp")`,
		`meshservice "s": spec.ports[1].targetPort.nme: unknown field, did you mean name?`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("missing %s in %v", w, err)
		}
	}
}
