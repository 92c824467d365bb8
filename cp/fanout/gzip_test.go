package fanout

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// servedMesh is n valid Dataplanes of mesh default (dp-0..), encoded as the link carries them.
func servedMesh(t *testing.T, n int) Served {
	t.Helper()
	sv := NewServed()
	for i := range n {
		rs, err := mesh.Decode("test", fmt.Appendf(nil, "type: Dataplane\nmesh: default\nname: dp-%d\nnetworking:\n  address: 10.0.%d.%d\n"+
			"  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n      version: v1\n", i, i>>8, i&255, i%7))
		if err != nil {
			t.Fatal(err)
		}
		body, err := cplink.EncodeResource(rs[0])
		if err != nil {
			t.Fatal(err)
		}
		sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: fmt.Sprintf("dp-%d", i), Body: body})
	}
	return sv
}

// An agent that lists cplink.FeatureGzipResources is sent a first sync compressed, one for
// every such agent at a version; one that does not is sent the resources as they are (and
// the control plane compresses nothing for it). Decompressed, the two answers hold the same
// resources at the same versions.
func TestGzipFirstSyncOnlyToAgentsThatTakeIt(t *testing.T) {
	cp, addr := startCP(t, servedMesh(t, 300))
	tbl := cp.tableFor("default", mesh.KindDataplane)
	old := dial(t, addr, "default", nil, mesh.KindDataplane)
	plain := old.recv()
	if len(plain.GetResources()) != 300 {
		t.Fatalf("an agent without the feature: %d resources, want the 300 as they are", len(plain.GetResources()))
	}
	if _, n := builds(tbl); n != 0 {
		t.Fatalf("compressed %d times for an agent that does not take it", n)
	}
	node := &core.Node{Id: "agent", Cluster: "default", ClientFeatures: []string{"other", cplink.FeatureGzipResources}}
	for i := range 3 {
		a := dialAs(t, addr, node, nil, mesh.KindDataplane)
		var r *discovery.DeltaDiscoveryResponse
		select {
		case got := <-a.in:
			if got.err != nil {
				t.Fatal(got.err)
			}
			r = got.r
		case <-time.After(5 * time.Second):
			t.Fatal("no response within 5 s")
		}
		if len(r.GetResources()) != 1 || r.GetResources()[0].GetResource().GetTypeUrl() != cplink.GzipResourcesTypeURL || r.GetNonce() == "" {
			t.Fatalf("agent %d, with the feature: %d resources, nonce %q; want one %s", i, len(r.GetResources()), r.GetNonce(), cplink.GzipResourcesTypeURL)
		}
		gz := r.GetResources()[0].GetResource().GetValue()
		if i == 0 {
			t.Logf("%d bytes as they are, %d compressed", proto.Size(plain), proto.Size(r))
		}
		if 3*len(gz) > proto.Size(plain) {
			t.Fatalf("compressed: %d bytes for %d as they are", len(gz), proto.Size(plain))
		}
		if got, want := versions(t, gunzipped(t, gz)), versions(t, plain); !maps.Equal(got, want) {
			t.Fatalf("decompressed, the answer holds %d resources (versions differ: %v), want the %d sent as they are", len(got), !maps.Equal(got, want), len(want))
		}
		a.ack(r)
	}
	if _, n := builds(tbl); n != 1 {
		t.Fatalf("compressed %d times for 3 agents at one version, want once", n)
	}
}

func gunzipped(t *testing.T, gz []byte) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var r discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// versions is name -> version of r's resources, each checked to carry its envelope.
func versions(t *testing.T, r *discovery.DeltaDiscoveryResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, res := range r.GetResources() {
		if len(res.GetResource().GetValue()) == 0 {
			t.Fatalf("%s: no envelope", res.GetName())
		}
		out[res.GetName()] = res.GetVersion()
	}
	return out
}

// An agent of an earlier kuma-dp (no client features: a raw stream, decoding every
// resource with the link's code) and the link's client (which takes compressed first
// syncs) against one control plane build the same model; the client received a fraction of
// the bytes.
func TestOldAndNewAgentsBuildOneModel(t *testing.T) {
	cp, addr := startCP(t, servedMesh(t, 500))
	c, err := cplink.NewClient(cplink.ClientConfig{Address: "grpc://" + addr, Name: "dp-1", Mesh: "default"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := c.Load(ctx)
	if u.Err != nil || u.Snapshot == nil {
		t.Fatalf("the link's first sync: %+v", u)
	}
	go func() { _ = c.Run(ctx, make(chan cplink.Update, 1)) }()

	old := dial(t, addr, "default", nil, cplink.Kinds...)
	var rs []mesh.Resource
	oldBytes := 0
	for range cplink.Kinds {
		r := old.recv()
		oldBytes += proto.Size(r)
		kind := cplink.KindOf(r.GetTypeUrl())
		for _, res := range r.GetResources() {
			d, err := cplink.DecodeResource(kind, res.GetName(), envelopeOf(t, res))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, d)
		}
		old.ack(r)
	}
	var self *mesh.Dataplane
	for _, r := range rs {
		if d, ok := r.(*mesh.Dataplane); ok && d.Name == "dp-1" {
			self = d
		}
	}
	snap, err := mesh.NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Hash != u.Snapshot.Hash || len(snap.Dataplanes) != 500 || len(u.Snapshot.Dataplanes) != 500 {
		t.Fatalf("models: the earlier agent's %s (%d dataplanes), the link's %s (%d)", snap.Hash, len(snap.Dataplanes), u.Snapshot.Hash, len(u.Snapshot.Dataplanes))
	}
	if got := c.Stats().BytesReceived.Load(); 3*got > int64(oldBytes) {
		t.Fatalf("the link received %d bytes, the earlier agent %d: want the compressed first sync", got, oldBytes)
	}
	if _, n := builds(cp.tableFor("default", mesh.KindDataplane)); n != 1 {
		t.Fatalf("the Dataplanes compressed %d times, want once", n)
	}
}

// envelopeOf is a resource's canonical document (its BytesValue envelope's content).
func envelopeOf(t *testing.T, r *discovery.Resource) []byte {
	t.Helper()
	var env wrapperspb.BytesValue
	if err := proto.Unmarshal(r.GetResource().GetValue(), &env); err != nil {
		t.Fatal(err)
	}
	return env.GetValue()
}
