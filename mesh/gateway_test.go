package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A gateway dataplane (Kuma's networking.gateway, DELEGATED or BUILTIN) has no inbounds: as
// in Kuma, it is valid with a gateway instead, and its gateway.tags need kuma.io/service.
// One such dataplane in the policies directory must not refuse the whole mesh, and an agent
// may run for one.
func TestGatewayDataplaneWithoutInbounds(t *testing.T) {
	gw := func(body string) string {
		return "type: Dataplane\nmesh: default\nname: gw-1\nnetworking:\n  address: 10.0.0.9\n" + body
	}
	for _, tc := range []struct{ name, doc, err string }{
		{"delegated", gw("  gateway:\n    type: DELEGATED\n    tags:\n      kuma.io/service: edge\n"), ""},
		{"builtin", gw("  gateway:\n    type: BUILTIN\n    tags: {kuma.io/service: edge, kuma.io/zone: z1}\n"), ""},
		{"type left out", gw("  gateway:\n    tags: {kuma.io/service: edge}\n"), ""},
		{"Kubernetes form", "apiVersion: kuma.io/v1alpha1\nkind: Dataplane\nmesh: default\nmetadata: {name: gw-1, namespace: kong}\nspec:\n  networking:\n    address: 10.0.0.9\n    gateway:\n      tags: {kuma.io/service: edge_kong_svc_80}\n", ""},
		{"no inbound, no gateway", gw("  outbound:\n  - port: 3333\n    tags: {kuma.io/service: redis}\n"),
			`f.yaml#1: dataplane "gw-1": networking.inbound: at least one inbound is required (or a gateway)`},
		{"gateway without the service tag", gw("  gateway:\n    tags: {app: edge}\n"),
			`f.yaml#1: dataplane "gw-1": networking.gateway.tags: must contain kuma.io/service`},
		{"gateway without tags", gw("  gateway:\n    type: DELEGATED\n"),
			`f.yaml#1: dataplane "gw-1": networking.gateway.tags: required, with kuma.io/service`},
		{"gateway of an unknown type", gw("  gateway:\n    type: SIDECAR\n    tags: {kuma.io/service: edge}\n"),
			`f.yaml#1: dataplane "gw-1": networking.gateway.type: must be DELEGATED or BUILTIN (value "SIDECAR")`},
		{"gateway tag value empty", gw("  gateway:\n    tags: {kuma.io/service: edge, team: \"\"}\n"),
			`f.yaml#1: dataplane "gw-1": networking.gateway.tags.team: empty tag value`},
		{"gateway not a mapping", gw("  gateway: edge\n"),
			`f.yaml#1: dataplane "gw-1": networking.gateway: expected a mapping with tags (value "edge")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Decode("f.yaml", []byte(tc.doc))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.err {
				t.Fatalf("error\n got %q\nwant %q", got, tc.err)
			}
			if tc.err == "" && len(rs) != 1 {
				t.Fatalf("decoded %d resources, want 1", len(rs))
			}
		})
	}

	// The agent's own dataplane a gateway, and one more in the directory.
	dir := t.TempDir()
	self := filepath.Join(dir, "dp.yaml")
	if err := os.WriteFile(self, []byte(gw("  gateway:\n    tags: {kuma.io/service: edge}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "pol")
	if err := os.Mkdir(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(gw("  gateway:\n    type: BUILTIN\n    tags: {kuma.io/service: edge2}\n"), "gw-1", "gw-2", 1)
	if err := os.WriteFile(filepath.Join(pol, "a.yaml"), []byte(other+"---\n"+dpA), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := Load(self, pol)
	if err != nil {
		t.Fatalf("a mesh with gateway dataplanes refused: %v", err)
	}
	if got := len(snap.Dataplanes); got != 3 {
		t.Errorf("%d dataplanes in the snapshot, want 3", got)
	}
}

// Kuma creates HostnameGenerators for MeshService and MeshMultiZoneService in every zone
// (local-mesh-service, synced-mesh-multi-zone-service...): a dump of a Kuma deployment holds
// them. They are accepted and kept with their kind (a MeshMultiZoneService's selects nothing
// here) instead of refusing the whole mesh. Their templates are checked.
func TestKumaHostnameGeneratorsForMeshServices(t *testing.T) {
	doc := func(sel, tmpl string) string {
		return "apiVersion: kuma.io/v1alpha1\nkind: HostnameGenerator\nmetadata:\n  name: local-mesh-service\n  namespace: kuma-system\nspec:\n  selector:\n    " +
			sel + ":\n      matchLabels:\n        kuma.io/origin: zone\n  template: '" + tmpl + "'\n"
	}
	for _, tc := range []struct{ sel, kind string }{
		{"meshService", "MeshService"},
		{"meshMultiZoneService", "MeshMultiZoneService"},
		{"meshExternalService", KindMeshExternalService},
	} {
		rs, err := Decode("f.yaml", []byte(doc(tc.sel, "{{ .DisplayName }}.{{ .Namespace }}.svc.mesh.local")))
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		ref := rs[0].(*HostnameGenerator).Spec.TargetRef
		if ref.Kind != tc.kind || ref.Tags.String() != "{kuma.io/origin=zone}" {
			t.Errorf("%s: targetRef %+v, want kind %s with the labels", tc.sel, ref, tc.kind)
		}
	}
	_, err := Decode("f.yaml", []byte(doc("meshService", "{{ .Nope }}.mesh")))
	if err == nil || !strings.Contains(err.Error(), `spec.template: template: no field "Nope"`) {
		t.Errorf("a bad template of a MeshService generator: %v", err)
	}
	_, err = Decode("f.yaml", []byte(doc("meshGateway", "{{ .DisplayName }}.mesh")))
	want := `f.yaml#1: hostnamegenerator "local-mesh-service": spec.selector.meshGateway: unknown field (known: meshExternalService, meshMultiZoneService, meshService)`
	if err == nil || err.Error() != want {
		t.Errorf("an unknown selector: error\n got %v\nwant %s", err, want)
	}
}

// A Dataplane in the Kubernetes form is named <name>.<namespace>, as Kuma names it: pods of
// one name in two namespaces (redis-0 in ns1 and in ns2) are two dataplanes, not a
// duplicate that refuses the whole mesh; and the agent's own dataplane, written either way,
// is the same one.
func TestKubernetesDataplaneNamesCarryTheNamespace(t *testing.T) {
	k8s := func(ns, ip string) string {
		return "apiVersion: kuma.io/v1alpha1\nkind: Dataplane\nmesh: default\nmetadata:\n  name: redis-0\n  namespace: " + ns +
			"\nspec:\n  networking:\n    address: " + ip + "\n    inbound:\n    - port: 6379\n      tags: {kuma.io/service: redis_" + ns + "_svc_6379}\n"
	}
	dir := t.TempDir()
	pol := filepath.Join(dir, "pol")
	if err := os.Mkdir(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "dps.yaml"), []byte(k8s("ns1", "10.5.0.1")+"---\n"+k8s("ns2", "10.5.0.2")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, self := range []string{
		k8s("ns1", "10.5.0.1"),
		"type: Dataplane\nmesh: default\nname: redis-0.ns1\nnetworking:\n  address: 10.5.0.1\n  inbound:\n  - port: 6379\n    tags: {kuma.io/service: redis_ns1_svc_6379}\n",
	} {
		f := filepath.Join(dir, "dp.yaml")
		if err := os.WriteFile(f, []byte(self), 0o644); err != nil {
			t.Fatal(err)
		}
		snap, err := Load(f, pol)
		if err != nil {
			t.Fatalf("two namespaces' redis-0: %v", err)
		}
		var names []string
		for _, d := range snap.Dataplanes {
			names = append(names, d.Name)
		}
		if got := strings.Join(names, ","); got != "redis-0.ns1,redis-0.ns2" || snap.Self.Name != "redis-0.ns1" {
			t.Errorf("dataplanes %s, self %s; want redis-0.ns1,redis-0.ns2 with self redis-0.ns1", got, snap.Self.Name)
		}
	}
	// Errors name it so too.
	_, err := Decode("f.yaml", []byte(strings.Replace(k8s("ns1", "10.5.0.1"), "port: 6379", "port: 0", 1)))
	if err == nil || !strings.Contains(err.Error(), `dataplane "redis-0.ns1": spec.networking.inbound[0].port`) {
		t.Errorf("error %v, want the dataplane named redis-0.ns1", err)
	}
}
