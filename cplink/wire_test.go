package cplink

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/mesh"
)

// Every resource of the bundled example mesh survives the envelope: decoded back with
// mesh.Decode it equals the resource read from its file, and encodes to the same bytes.
func TestEnvelopeRoundTrip(t *testing.T) {
	root := filepath.Join("..", "testdata", "mesh")
	rs, err := mesh.LoadDir(filepath.Join(root, "policies"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := mesh.LoadFile(filepath.Join(root, "dataplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, self...)
	routing, err := mesh.DecodeFromControlPlane("routing", []byte(routingDocs))
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, routing...)
	// Kuma 2.x's MeshServices and route policies (Kuma's documented examples), both forms.
	for _, form := range []string{"universal", "kubernetes"} {
		kuma2, err := mesh.LoadDir(filepath.Join("..", "testdata", "kuma2", form))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, kuma2...)
	}
	kinds := map[string]int{}
	for _, r := range rs {
		body, err := EncodeResource(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeResource(r.Kind(), r.GetMeta().Name, body)
		if err != nil {
			t.Fatalf("%s/%s: %v\n%s", r.Kind(), r.GetMeta().Name, err, body)
		}
		back.GetMeta().Source = r.GetMeta().Source
		if !reflect.DeepEqual(r, back) {
			a, _ := json.Marshal(r)
			b, _ := json.Marshal(back)
			t.Errorf("%s/%s changed on the wire:\n%s\n%s", r.Kind(), r.GetMeta().Name, a, b)
		}
		again, _ := EncodeResource(back)
		if string(again) != string(body) {
			t.Errorf("%s/%s: encoding not stable:\n%s\n%s", r.Kind(), r.GetMeta().Name, body, again)
		}
		kinds[r.Kind()]++
	}
	for _, k := range Kinds {
		if kinds[k] == 0 {
			t.Errorf("the example mesh has no %s: the round trip does not cover it", k)
		}
		if KindOf(TypeURL(k)) != k {
			t.Errorf("KindOf(TypeURL(%s)) = %q", k, KindOf(TypeURL(k)))
		}
	}
}

// An envelope that fails validation is refused with the resource and the field named.
func TestDecodeResourceNamesResourceAndField(t *testing.T) {
	body := []byte(`{"type":"VirtualOutbound","mesh":"default","name":"bad","selectors":[{"match":{"kuma.io/service":"*"}}],"conf":{"host":"{{.service","port":"80","parameters":[{"name":"service","tagKey":"kuma.io/service"}]}}`)
	_, err := DecodeResource(mesh.KindVirtualOutbound, "bad", body)
	if err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), "conf.host") {
		t.Fatalf("want an error naming virtualoutbound \"bad\" and conf.host, got %v", err)
	}
	good := strings.Replace(string(body), `{{.service"`, `{{.service}}.mesh"`, 1)
	if _, err := DecodeResource(mesh.KindVirtualOutbound, "bad", []byte(good)); err != nil {
		t.Fatalf("the fixed envelope: %v", err)
	}
	_, err = DecodeResource(mesh.KindTrafficRoute, "bad", []byte(good))
	if err == nil || !strings.Contains(err.Error(), "not the TrafficRoute") {
		t.Fatalf("want a kind mismatch, got %v", err)
	}
}

// A resource kept from the control plane names its kind's source, shared by every resource
// of the kind (a source of each its own cost ~250 bytes a dataplane); an error still names
// the resource's own.
func TestDecodedResourcesShareTheirKindsSource(t *testing.T) {
	dp := func(name, addr string) []byte {
		return []byte("type: Dataplane\nmesh: default\nname: " + name + "\nnetworking:\n  address: " + addr +
			"\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web\n")
	}
	var sources []string
	for _, name := range []string{"web-1", "web-2"} {
		r, err := DecodeResource(mesh.KindDataplane, name, dp(name, "10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, r.GetMeta().Source.String())
	}
	if sources[0] != "control plane Dataplane" || sources[1] != sources[0] {
		t.Fatalf("sources %q, want both \"control plane Dataplane\"", sources)
	}
	_, err := DecodeResource(mesh.KindDataplane, "web-3", dp("web-3", "10.0.0.300"))
	if err == nil || !strings.Contains(err.Error(), "control plane Dataplane/web-3") || !strings.Contains(err.Error(), "networking.address") {
		t.Fatalf("want an error naming control plane Dataplane/web-3 and networking.address, got %v", err)
	}
}

// BenchmarkDecodedDataplaneBytes reports the heap 10,000 Dataplanes hold once received from
// the control plane, each decoded from its own envelope (two inbounds' worth of tags, as a
// Kubernetes pod's: the workload's shared, the pod's name and address its own).
//
//	go test ./cplink -run '^$' -bench DecodedDataplaneBytes -benchtime 3x
func BenchmarkDecodedDataplaneBytes(b *testing.B) {
	const n = 10000
	round := 0
	for b.Loop() {
		round++ // names new to the process each round, as a first sync's are
		names, bodies := make([]string, n), make([][]byte, n)
		for i := range n {
			app := fmt.Sprintf("app-%d", i/5)
			names[i] = fmt.Sprintf("%s-%d-%05d.kuma-demo", app, round, i)
			bodies[i] = fmt.Appendf(nil, "type: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: 10.%d.%d.%d\n"+
				"  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: %s_kuma-demo_svc_8080\n"+
				"      k8s.kuma.io/namespace: kuma-demo\n      kuma.io/protocol: http\n      app: %s\n",
				names[i], round, i>>8, i&255, app, app)
		}
		var before, after runtime.MemStats
		settle() // the last round's resources, and their entries in the process's tables, gone
		runtime.ReadMemStats(&before)
		kept := make([]mesh.Resource, 0, n)
		for i := range n {
			r, err := DecodeResource(mesh.KindDataplane, names[i], bodies[i])
			if err != nil {
				b.Fatal(err)
			}
			kept = append(kept, r)
		}
		settle()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "bytes/dataplane")
		runtime.KeepAlive(kept)
		runtime.KeepAlive(names) // counted in both readings
		runtime.KeepAlive(bodies)
	}
}

// settle collects until what was dropped is gone: weak tables (package unique's, mesh's
// shared tag sets) drop their entries in cleanups that run after a collection, and what the
// entries held goes at the next one.
func settle() {
	for range 3 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkDecodeEnvelope: what an agent pays per Dataplane received, in the envelope's
// block YAML (mesh's one-pass reader) and, for comparison, in JSON (sigs.k8s.io/yaml).
func BenchmarkDecodeEnvelope(b *testing.B) {
	rs, err := mesh.LoadFile(filepath.Join("..", "testdata", "mesh", "dataplane.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	r := rs[0]
	body, err := EncodeResource(r)
	if err != nil {
		b.Fatal(err)
	}
	asJSON, err := yaml.YAMLToJSON(body)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{{"yaml", body}, {"json", asJSON}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if _, err := DecodeResource(r.Kind(), r.GetMeta().Name, c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzDecodeResource feeds arbitrary envelopes, as a control plane (or anything posing as
// one) could send: each is refused with an error or decoded to a resource whose canonical
// document decodes back to the same document.
func FuzzDecodeResource(f *testing.F) {
	rs, err := mesh.LoadDir(filepath.Join("..", "testdata", "mesh", "policies"))
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range rs {
		body, err := EncodeResource(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r.Kind(), r.GetMeta().Name, body)
	}
	f.Add(mesh.KindDataplane, "x", []byte(`{"type":"Dataplane","name":"x"}`))
	f.Fuzz(func(t *testing.T, kind, name string, body []byte) {
		r, err := DecodeResource(kind, name, body)
		if err != nil {
			return
		}
		canonical, err := EncodeResource(r)
		if err != nil {
			t.Fatalf("decoded but does not encode: %v", err)
		}
		back, err := DecodeResource(kind, name, canonical)
		if err != nil {
			t.Fatalf("canonical form refused: %v\n%s", err, canonical)
		}
		again, err := EncodeResource(back)
		if err != nil || string(again) != string(canonical) {
			t.Fatalf("canonical form not stable (%v):\n%s\n%s", err, canonical, again)
		}
	})
}

// routingDocs are the router-shard kinds the example mesh does not hold: a Router, a Route
// admitted on it (its status is the control plane's, carried as it is) and a zone of the
// control plane's DNS.
const routingDocs = `type: Router
mesh: default
name: shard1
dns: shard1.apps.test
dataplanes: {kuma.io/service: gateway}
---
type: Route
mesh: default
name: shop.acme
namespace: acme
host: www.acme.test
dnsType: user
path: /shop
to: {service: web, port: 8080}
status:
  phase: scheduled
  router: shard1
  dns: www.acme.test
  ingress:
  - router: shard1
    host: www.acme.test
    conditions: [{type: Admitted, status: "True"}]
---
type: DNSZone
name: shard1.apps.test
origin: shard1.apps.test
zone: |
  $ORIGIN shard1.apps.test.
  $TTL 30
  shard1.apps.test.	30	IN	SOA	ns.shard1.apps.test. hostmaster.shard1.apps.test. 7 300 60 1209600 30
  *.shard1.apps.test.	30	IN	A	10.1.0.1
`

// A TrafficRoute written in Kuma's form (conf.destination, conf.loadBalancer) crosses the
// link in the canonical form (conf a list, loadBalancer beside it) and reads back the same.
func TestKumaRouteCrossesTheLink(t *testing.T) {
	rs, err := mesh.Decode("route-all.yaml", []byte("type: TrafficRoute\nname: route-all-default\nmesh: default\n"+
		"sources:\n  - match:\n      kuma.io/service: '*'\ndestinations:\n  - match:\n      kuma.io/service: '*'\n"+
		"conf:\n  loadBalancer:\n    ringHash: {hashFunction: MURMUR_HASH_2}\n  destination:\n    kuma.io/service: '*'\n"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := EncodeResource(rs[0])
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeResource(mesh.KindTrafficRoute, "route-all-default", body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	tr := back.(*mesh.TrafficRoute)
	if len(tr.Conf) != 1 || tr.Conf[0].Weight != 1 || tr.Conf[0].Destination.Value(mesh.ServiceTag) != mesh.Wildcard ||
		string(tr.LoadBalancer) != `{"ringHash":{"hashFunction":"MURMUR_HASH_2"}}` {
		t.Fatalf("read back: %+v\n%s", tr, body)
	}
}

// A TrafficRoute with Kuma's conf.http crosses the link (http beside conf in the canonical
// form) and reads back with every rule equal: matchers (an empty exact value too), rewrites,
// header changes, splits and destinations.
func TestKumaHTTPRouteCrossesTheLink(t *testing.T) {
	doc := "type: TrafficRoute\nname: api\nmesh: default\n" +
		"sources:\n  - match:\n      kuma.io/service: '*'\ndestinations:\n  - match:\n      kuma.io/service: backend\n" +
		"conf:\n  destination:\n    kuma.io/service: backend\n  loadBalancer:\n    maglev: {}\n  http:\n" +
		"  - match:\n      method: {exact: GET}\n      path: {prefix: /api}\n      headers:\n        x-canary: {exact: 'true'}\n        x-empty: {exact: ''}\n" +
		"    modify:\n      path: {rewritePrefix: /v2}\n      host: {value: api.internal}\n" +
		"      requestHeaders:\n        add: [{name: x-a, value: '1', append: true}]\n        remove: [{name: x-b}]\n" +
		"      responseHeaders:\n        add: [{name: x-c, value: 'yes'}]\n" +
		"    split:\n    - weight: 3\n      destination: {kuma.io/service: backend, version: v2}\n" +
		"  - match:\n      path: {regex: '^/u/([0-9]+)$'}\n" +
		"    modify:\n      path: {regex: {pattern: '^/u/([0-9]+)$', substitution: '/users/\\1'}}\n" +
		"      host: {fromPath: {pattern: '^/u/([0-9]+)$', substitution: 'u\\1.internal'}}\n" +
		"    destination: {kuma.io/service: '*'}\n"
	rs, err := mesh.Decode("api.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	sent := rs[0].(*mesh.TrafficRoute)
	if len(sent.HTTP) != 2 {
		t.Fatalf("decoded %d rules", len(sent.HTTP))
	}
	body, err := EncodeResource(sent)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeResource(mesh.KindTrafficRoute, "api", body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	tr := back.(*mesh.TrafficRoute)
	if !reflect.DeepEqual(tr.HTTP, sent.HTTP) || !reflect.DeepEqual(tr.Conf, sent.Conf) || string(tr.LoadBalancer) != `{"maglev":{}}` {
		t.Fatalf("read back differently:\n%s", body)
	}
	if sub := tr.HTTP[1].Modify.Path.Regex.Substitution; sub != `/users/\1` {
		t.Errorf("substitution %q", sub)
	}
}

// A route is sent under its stored name, name.namespace; an older control plane's plain
// name is taken too; another route's name is refused.
func TestDecodeResourceRouteNames(t *testing.T) {
	doc := []byte("type: Route\nmesh: default\nname: store\nnamespace: shop\nhost: www\nto: {service: web, port: 8080}\n")
	for _, name := range []string{"store.shop", "store"} {
		if _, err := DecodeResource(mesh.KindRoute, name, doc); err != nil {
			t.Errorf("route shop/store sent as %q: %v", name, err)
		}
	}
	if _, err := DecodeResource(mesh.KindRoute, "store.blog", doc); err == nil || !strings.Contains(err.Error(), `"store.shop"`) {
		t.Errorf("route shop/store sent as store.blog: %v, want refused naming store.shop", err)
	}
}
