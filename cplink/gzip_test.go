package cplink

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kumadp/kuma-dp/mesh"
)

// The agent lists the feature, and a response whose resources come compressed is applied as
// the same response uncompressed would be: resources and removals, counted as received.
func TestClientTakesGzipResources(t *testing.T) {
	cp, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"), testDataplane("backend-1", "backend", "10.0.0.2"))
	c, out := runLink(t, addr)
	cp.mu.Lock()
	features := cp.features
	cp.mu.Unlock()
	if len(features) != 1 || !slices.Contains(features[0], FeatureGzipResources) {
		t.Fatalf("client features sent %q, want %q in the node", features, FeatureGzipResources)
	}
	inner, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane),
		Resources: []*discovery.Resource{cp.resource(testDataplane("redis-1", "redis", "10.0.0.3"), "2"),
			cp.resource(testDataplane("cache-1", "cache", "10.0.0.4"), "2")},
		RemovedResources: []string{"backend-1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp := &discovery.DeltaDiscoveryResponse{}
	if err := proto.Unmarshal(GzipResponse(inner, TypeURL(mesh.KindDataplane), "7"), resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetResource().GetTypeUrl() != GzipResourcesTypeURL {
		t.Fatalf("GzipResponse: %v, want one %s resource", resp.GetResources(), GzipResourcesTypeURL)
	}
	resp.Nonce = "z1"
	cp.push <- resp
	u := nextUpdate(t, out)
	if u.Err != nil {
		t.Fatal(u.Err)
	}
	var got []string
	for _, d := range u.Snapshot.Dataplanes {
		got = append(got, d.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"cache-1", "redis-1", "web-1"}) {
		t.Fatalf("dataplanes after the compressed response %v, want [cache-1 redis-1 web-1]", got)
	}
	if n := cp.nacked(); len(n) != 0 {
		t.Fatalf("NACKs %q", n)
	}
	if n := c.Stats().Resources.Load(); n != 4 { // the first sync's 2, and the compressed one's 2
		t.Fatalf("%d resources counted, want 4 (those the compressed one holds, not itself)", n)
	}
}

// A compressed response that decompresses to more than the link takes is refused (NACK)
// with an error saying so; the last model stays, and
// content that is not gzip, or not a response, is refused naming what it is.
func TestClientRefusesGzipBomb(t *testing.T) {
	cp, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"))
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.maxGunzip != MaxResponseBytes {
		t.Fatalf("decompressed limit %d, want MaxResponseBytes %d", c.maxGunzip, MaxResponseBytes)
	}
	c.maxGunzip = 1 << 20
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if u := c.Load(ctx); u.Err != nil {
		t.Fatal(u.Err)
	}
	out := make(chan Update, 4)
	go func() { _ = c.Run(ctx, out) }()

	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	if _, err := zw.Write(make([]byte, 64<<20)); err != nil { // 64 MiB of zeros: 64 KiB compressed
		t.Fatal(err)
	}
	zw.Close()
	push := func(nonce string, value []byte) {
		cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: nonce,
			Resources: []*discovery.Resource{{Name: GzipResourcesName, Resource: &anypb.Any{TypeUrl: GzipResourcesTypeURL, Value: value}}}}
	}
	waitNacks := func(n int) []string {
		deadline := time.Now().Add(10 * time.Second)
		for len(cp.nacked()) < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return cp.nacked()
	}
	push("b1", bomb.Bytes())
	if n := waitNacks(1); len(n) != 1 || !strings.Contains(n[0], "decompress to more than 1048576") || !strings.Contains(n[0], "compression bomb") {
		t.Fatalf("a bomb: NACKs %q, want one saying it decompresses to more than the limit", n)
	}
	push("b2", []byte("plain text"))
	if n := waitNacks(2); len(n) != 2 || !strings.Contains(n[1], "not gzip") {
		t.Fatalf("not gzip: NACKs %q", n)
	}
	var junk bytes.Buffer
	zw = gzip.NewWriter(&junk)
	_, _ = zw.Write([]byte{0xff, 0xff, 0xff})
	zw.Close()
	push("b3", junk.Bytes())
	if n := waitNacks(3); len(n) != 3 || !strings.Contains(n[2], "not a DeltaDiscoveryResponse") {
		t.Fatalf("not a response: NACKs %q", n)
	}
	select {
	case u := <-out:
		t.Fatalf("an update after refused responses: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
	if c.Stats().Nacks.Load() != 3 {
		t.Errorf("%d NACKs counted, want 3", c.Stats().Nacks.Load())
	}
}

// BenchmarkFirstSync10k is the agent's cost of a first sync of 10,000 Dataplanes as it
// arrives (the Dataplanes' response decoded from its bytes, applied, the model built), sent
// as they are and compressed: what decompression adds to a first sync.
func BenchmarkFirstSync10k(b *testing.B) {
	cp := &fakeCP{t: b}
	all := make([]*discovery.Resource, 10000)
	for i := range all {
		name := fmt.Sprintf("dp-%d", i)
		all[i] = cp.resource(testDataplane(name, name, fmt.Sprintf("10.0.%d.%d", i/250, i%250)), "1")
	}
	plain, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Resources: all})
	if err != nil {
		b.Fatal(err)
	}
	for _, wire := range []struct {
		name  string
		bytes []byte
	}{{"plain", plain}, {"gzip", GzipResponse(plain, TypeURL(mesh.KindDataplane), "1")}} {
		b.Run(wire.name, func(b *testing.B) {
			for b.Loop() {
				c, ctx := unconnectedClient(b, "dp-0")
				for _, kind := range Kinds {
					resp := &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(kind), Nonce: "0"}
					if kind == mesh.KindDataplane {
						if err := proto.Unmarshal(wire.bytes, resp); err != nil {
							b.Fatal(err)
						}
					}
					if ack := c.handle(ctx, resp); ack.GetErrorDetail() != nil {
						b.Fatal(ack.GetErrorDetail().GetMessage())
					}
				}
				if !c.sent {
					b.Fatal("no model after the first sync")
				}
			}
			b.ReportMetric(float64(len(wire.bytes)), "wire-bytes")
		})
	}
}
