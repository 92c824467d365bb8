package mesh

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Dataplanes with the same state, health, transparent proxying, admin port and probes
// share one object of each; one that differs keeps its own, and each reads as written.
func TestEqualPartsShared(t *testing.T) {
	raw, err := os.ReadFile("../testdata/kuma/kubernetes-dataplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubeDP := string(raw)
	doc := strings.ReplaceAll(kubeDP, "NAME", "a") + "---\n" + strings.ReplaceAll(kubeDP, "NAME", "b") + "---\n" +
		strings.ReplaceAll(strings.ReplaceAll(kubeDP, "NAME", "c"), "15006", "16006")
	rs, err := Decode("kube.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := rs[0].(*Dataplane), rs[1].(*Dataplane), rs[2].(*Dataplane)
	if a.Networking.NetworkingExtra != b.Networking.NetworkingExtra || a.Networking.TransparentProxying() != b.Networking.TransparentProxying() {
		t.Error("equal networking extras are not shared")
	}
	if a.Networking.Inbound[0].InboundExtra != b.Networking.Inbound[0].InboundExtra || a.Kept() != b.Kept() {
		t.Error("equal inbound extras or kept fields are not shared")
	}
	if c.Networking.TransparentProxying() == a.Networking.TransparentProxying() || c.Networking.NetworkingExtra == a.Networking.NetworkingExtra {
		t.Error("a different redirectPortInbound shares the others' transparent proxying")
	}
	if c.Networking.TransparentProxying().RedirectPortInbound != 16006 || a.Networking.TransparentProxying().RedirectPortInbound != 15006 {
		t.Errorf("ports read back %d, %d", c.Networking.TransparentProxying().RedirectPortInbound, a.Networking.TransparentProxying().RedirectPortInbound)
	}
	j, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"b"`, `"admin":{"port":9901}`, `"health":{"ready":true}`, `"redirectPortInbound":15006`, `"probes":{"port":9000}`} {
		if !strings.Contains(string(j), want) {
			t.Errorf("JSON lacks %s: %s", want, j)
		}
	}
}

// Inbounds with the same state but addresses of their own keep their own extras: each reads
// its address back.
func TestInboundAddressNotShared(t *testing.T) {
	doc := "type: Dataplane\nmesh: default\nname: NAME\nnetworking:\n  address: 10.0.0.9\n  inbound:\n    - port: 80\n      address: ADDR\n      state: Ready\n      tags:\n        kuma.io/service: web\n"
	var sb strings.Builder
	for _, d := range [][2]string{{"a", "10.0.0.1"}, {"b", "10.0.0.2"}} {
		sb.WriteString(strings.NewReplacer("NAME", d[0], "ADDR", d[1]).Replace(doc) + "---\n")
	}
	rs, err := Decode("addr.yaml", []byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	a, b := rs[0].(*Dataplane).Networking.Inbound[0], rs[1].(*Dataplane).Networking.Inbound[0]
	if a.Address() != "10.0.0.1" || b.Address() != "10.0.0.2" || a.State() != "Ready" || b.State() != "Ready" {
		t.Errorf("inbound addresses read back %q and %q (states %q, %q)", a.Address(), b.Address(), a.State(), b.State())
	}
}

// A table shares at most maxInterned values; past that, values are kept as given.
func TestInternTableCapped(t *testing.T) {
	var tb internTable[int, DataplaneKept]
	for i := range maxInterned + 5 {
		v := &DataplaneKept{ModificationTime: "t"}
		got := tb.get(i, v)
		if i < maxInterned && (got == v || got.ModificationTime != "t") {
			t.Fatalf("value %d not copied into the table", i)
		}
		if i >= maxInterned && got != v {
			t.Fatalf("value %d shared past the cap", i)
		}
	}
	if again := tb.get(3, &DataplaneKept{}); again.ModificationTime != "t" {
		t.Error("a key seen before did not give its shared value")
	}
}
