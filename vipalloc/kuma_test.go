package vipalloc

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// kumaVO is a VirtualOutbound in Kuma's form (conf.parameters).
func kumaVO(name, host, port string, params []mesh.Parameter, sels ...mesh.Tags) *mesh.VirtualOutbound {
	v := vo(name, host, port, nil, sels...)
	v.Conf.Parameters = params
	return v
}

// Kuma renders with the tags a dataplane has: a parameter whose tag is missing skips the
// dataplane only when the template needs the value.
func TestKumaRendersWithTheTagsPresent(t *testing.T) {
	params := []mesh.Parameter{{Name: "service", TagKey: mesh.ServiceTag}, {Name: "port", TagKey: "port"}}
	dps := []*mesh.Dataplane{dp("web-1", svc("web", "v1", "")), dp("db-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "db", "port": "5432"}))}
	vos := []*mesh.VirtualOutbound{
		// never uses port: a name for both
		kumaVO("unused", "{{.service}}.svc", "80", params, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
		// tolerates its absence
		kumaVO("tolerant", "{{.service}}.tolerant", "{{if .port}}{{.port}}{{else}}8080{{end}}", params, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
		// needs it: web-1 is skipped
		kumaVO("needs", "{{.service}}.needs", "{{.port}}", params, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
		// a literal host with an unused parameter
		kumaVO("literal", "foo.mesh", "80", params, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})),
	}
	tb := allocate(t, newAlloc(t, nil), snap(dps, vos))
	want := map[string][]uint32{
		"web.svc": {80}, "db.svc": {80},
		"web.tolerant": {8080}, "db.tolerant": {5432},
		"db.needs": {5432},
		"foo.mesh": {80},
	}
	for host, ports := range want {
		e, ok := tb.Lookup(host + ".")
		if !ok {
			t.Errorf("%s: missing", host)
			continue
		}
		if !reflect.DeepEqual(e.Ports(), ports) {
			t.Errorf("%s: ports %v, want %v", host, e.Ports(), ports)
		}
	}
	if _, ok := tb.Lookup("web.needs."); ok {
		t.Error("web.needs rendered without the port it needs")
	}
	found := false
	for _, s := range tb.Skipped() {
		if s.Origin.Name == "needs" && s.Reason == `inbound tags lack "port", needed by the host/port template` {
			found = true
		}
	}
	if !found {
		t.Errorf("the skipped tuple does not say which tag is missing: %+v", tb.Skipped())
	}
}

// A selector without kuma.io/service (valid in Kuma) selects across services.
func TestKumaSelectorAcrossServices(t *testing.T) {
	params := []mesh.Parameter{{Name: "service", TagKey: mesh.ServiceTag}}
	dps := []*mesh.Dataplane{
		dp("web-eu", mesh.TagsOf(map[string]string{mesh.ServiceTag: "web", "region": "eu"})),
		dp("db-eu", mesh.TagsOf(map[string]string{mesh.ServiceTag: "db", "region": "eu"})),
		dp("db-us", mesh.TagsOf(map[string]string{mesh.ServiceTag: "db", "region": "us"})),
	}
	vos := []*mesh.VirtualOutbound{kumaVO("eu", "{{.service}}.eu.mesh", "80", params, mesh.TagsOf(map[string]string{"region": "eu"}))}
	if err := mesh.Validate(vos[0]); err != nil {
		t.Fatalf("Kuma-valid selector {region: eu} refused: %v", err)
	}
	tb := allocate(t, newAlloc(t, nil), snap(dps, vos))
	for _, h := range []string{"web.eu.mesh.", "db.eu.mesh."} {
		if _, ok := tb.Lookup(h); !ok {
			t.Errorf("%s missing", h)
		}
	}
}

// One template rendering two dataplanes of one service onto one hostname with different
// ports: Kuma keeps the name for both ports (one VIP, two outbound ports).
func TestKumaOneHostTwoPorts(t *testing.T) {
	params := []mesh.Parameter{{Name: "service", TagKey: mesh.ServiceTag}, {Name: "port", TagKey: "port"}}
	dps := []*mesh.Dataplane{
		dp("api-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "api", "port": "8080"})),
		dp("api-2", mesh.TagsOf(map[string]string{mesh.ServiceTag: "api", "port": "9090"})),
	}
	vos := []*mesh.VirtualOutbound{kumaVO("by-port", "{{.service}}.ports.mesh", "{{.port}}", params, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))}
	tb := allocate(t, newAlloc(t, nil), snap(dps, vos))
	e, ok := tb.Lookup("api.ports.mesh.")
	if !ok {
		t.Fatal("api.ports.mesh missing")
	}
	if !reflect.DeepEqual(e.Ports(), []uint32{8080, 9090}) {
		t.Fatalf("ports %v, want both [8080 9090]", e.Ports())
	}
	for _, s := range tb.Skipped() {
		t.Errorf("skipped: %+v", s)
	}
}

// Kuma gives no names to an inbound in state Ignored, nor to one on a reserved port.
func TestKumaIgnoredAndReservedInbounds(t *testing.T) {
	web := dp("web-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"}))
	ignored := dp("side-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "sidecar-only"}))
	ignored.Networking.Inbound[0].Extra().State = mesh.InboundIgnored
	reserved := dp("infra-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "infra"}))
	reserved.Networking.Inbound[0].Port = mesh.FirstReservedPort
	doc := "type: Dataplane\nmesh: default\nname: side-1\nnetworking:\n  address: 10.0.0.9\n  inbound:\n  - port: 8080\n    state: Ignored\n    health: {ready: false}\n    tags:\n      kuma.io/service: sidecar-only\n"
	if _, err := mesh.Decode("dp.yaml", []byte(doc)); err != nil {
		t.Fatalf("Kuma's inbound state and health refused: %v", err)
	}
	if _, err := mesh.Decode("dp.yaml", []byte(strings.Replace(doc, "Ignored", "Sleeping", 1))); err == nil || !strings.Contains(err.Error(), "networking.inbound[0].state") {
		t.Fatalf("an unknown state: %v", err)
	}
	tb := allocate(t, newAlloc(t, nil), snap([]*mesh.Dataplane{web, ignored, reserved}, nil))
	if _, ok := tb.Lookup("web.mesh."); !ok {
		t.Fatal("web.mesh missing")
	}
	for _, h := range []string{"sidecar-only.mesh.", "infra.mesh."} {
		if _, ok := tb.Lookup(h); ok {
			t.Errorf("%s named, as Kuma would not", h)
		}
	}
}

// HostnameGenerator as Kuma: {{ .Namespace }} is the resource's Kubernetes namespace, and
// {{ .Zone }} falls back to the local zone for a resource with no zone label.
func TestKumaHostnameGeneratorNamespaceAndZone(t *testing.T) {
	self := dp("web-1", svc("web", "v1", "zone-1")) // the local zone: zone-1
	gen := hg("ns", "{{ .DisplayName }}.{{ .Namespace }}.{{ .Zone }}.ext", mesh.TagsOf(map[string]string{"access": "yes"}))
	local := mes("local", 80, map[string]string{"access": "yes", mesh.NamespaceLabel: "payments"})
	remote := mes("remote", 80, map[string]string{"access": "yes", mesh.NamespaceLabel: "shop", mesh.ZoneTag: "zone-2"})
	if err := mesh.Validate(gen); err != nil {
		t.Fatalf("{{ .Namespace }} refused: %v", err)
	}
	tb := allocate(t, newAlloc(t, nil), snap([]*mesh.Dataplane{self}, nil, gen, local, remote))
	for _, h := range []string{"local.payments.zone-1.ext.", "remote.shop.zone-2.ext."} {
		if _, ok := tb.Lookup(h); !ok {
			t.Errorf("%s missing; have %v", h, keysOf(tb))
		}
	}
}
