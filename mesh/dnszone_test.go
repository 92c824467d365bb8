package mesh

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// zoneDoc is a Dataplane and a DNSZone in one file.
var zoneDoc = "type: Dataplane\nname: web-1\nnetworking:\n  address: 10.0.0.1\n  inbound: [{port: 80, tags: {kuma.io/service: web}}]\n---\n" +
	testutil.GeneratingZone()

// A DNSZone is the control plane's: a file (or the store, or the API, which all decode with
// Decode) holding one is refused, naming the document and the kind, and the file's other
// resources still decode; only the link's decoding takes it.
func TestDecodeRefusesDNSZone(t *testing.T) {
	rs, err := Decode("zones.yaml", []byte(zoneDoc))
	if err == nil || !strings.Contains(err.Error(), `zones.yaml#2: dnszone "evil.test": type: a DNSZone is built by the control plane`) {
		t.Fatalf("want the DNSZone refused with its document named, got %v", err)
	}
	if len(rs) != 1 || rs[0].Kind() != KindDataplane {
		t.Fatalf("the file's other resources: %v", rs)
	}
	k8s := "apiVersion: kuma.io/v1alpha1\nkind: DNSZone\nmetadata: {name: evil.test}\nspec: {origin: evil.test, zone: \"@ 30 IN SOA a. b. 1 2 3 4 5\"}\n"
	if _, err := Decode("k8s.yaml", []byte(k8s)); err == nil || !strings.Contains(err.Error(), "built by the control plane") {
		t.Fatalf("the Kubernetes form: %v", err)
	}
	rs, err = DecodeFromControlPlane("link", []byte(zoneDoc))
	if err != nil || len(rs) != 2 {
		t.Fatalf("from the control plane: %d resources, %v", len(rs), err)
	}
}
