package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kumadp/kuma-dp/cplink"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// BenchmarkFeedServe: the feed's work for one changed resource in a store of N Dataplanes,
// with one table (the agents' mesh) in use: the served set rebuilt from the decoded cache and
// compared with the table (the agents' side is not in it).
//
//	go test ./cp/fanout -run '^$' -bench FeedServe
func BenchmarkFeedServe(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cp := New(nil, slog.New(slog.DiscardHandler))
			f := NewFeed(nil, cp, slog.New(slog.DiscardHandler))
			items := make([]cpstore.Item, n)
			for i := range n {
				k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: fmt.Sprintf("dp-%d", i)}
				items[i] = cpstore.Item{Key: k, Doc: dataplaneDoc(k.Name, "v0"), Version: int64(i + 1), Created: time.Unix(1, 0)}
			}
			f.applyStore(f.load(items))
			cp.tableFor("default", mesh.KindDataplane)
			b.ResetTimer()
			for i := range b.N {
				k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "dp-0"}
				f.apply(cpstore.Event{Type: cpstore.Put, Revision: int64(n + i + 1),
					Item: cpstore.Item{Key: k, Doc: dataplaneDoc("dp-0", fmt.Sprintf("v%d", i+1)), Version: int64(n + i + 1)}})
				f.serve()
			}
		})
	}
}

// BenchmarkStreamsOneChange: the delta server alone, in process: N agents on real gRPC
// streams over loopback (plain text) subscribed to the Dataplanes of a 1,000-Dataplane
// mesh; each iteration changes one Dataplane and waits until every agent has it and has
// ACKed. The agents only count (no decoding), so what is measured is the server's and
// gRPC's work per agent per change.
//
//	go test ./cp/fanout -run '^$' -bench StreamsOneChange -benchtime 20x
func BenchmarkStreamsOneChange(b *testing.B) {
	const agents = 1000
	sv := servedN(1000, 0)
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.Apply(sv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = cp.Serve(ctx, cp.GRPCServer(nil, 0, 0), ln) }()
	got := make(chan struct{}, agents)
	for i := range agents {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: cplink.TypeURL(mesh.KindDataplane),
			Node: &core.Node{Id: fmt.Sprintf("a-%d", i), Cluster: "default"}}); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				r, err := s.Recv()
				if err != nil {
					return
				}
				if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	for range agents { // the first sync
		<-got
	}
	b.ResetTimer()
	for n := range b.N {
		sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-0", Body: fmt.Appendf(nil, "changed %d", n)})
		cp.Apply(sv)
		for range agents {
			<-got
		}
	}
}

// BenchmarkFeedBytesPerDataplane: the heap a replica's feed holds per stored Dataplane (their
// served encodings and keys, the served set), beside the stored document's size: what a
// large mesh costs every replica.
//
//	go test ./cp/fanout -run '^$' -bench FeedBytesPerDataplane -benchtime 1x
func BenchmarkFeedBytesPerDataplane(b *testing.B) {
	const n = 20000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cp := New(nil, slog.New(slog.DiscardHandler))
		f := NewFeed(nil, cp, slog.New(slog.DiscardHandler))
		items := make([]cpstore.Item, n)
		stored := 0
		for i := range n {
			k := cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: fmt.Sprintf("dp-%d", i)}
			doc := dataplaneDoc(k.Name, "v1")
			stored += len(doc)
			items[i] = cpstore.Item{Key: k, Doc: doc, Version: int64(i + 1), Created: time.Unix(1, 0)}
		}
		f.applyStore(f.load(items))
		items = nil // as relist drops them
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/dataplane")
		b.ReportMetric(float64(stored)/n, "doc-B/dataplane")
		runtime.KeepAlive(f)
	}
}

// BenchmarkServedDoc: what serving one stored Dataplane costs the feed, and its parts: the
// document decoded (mesh.Decode) and the resource encoded as the link carries it
// (cplink.EncodeResource). A replica pays it for every stored resource when it starts.
//
//	go test ./cp/fanout -run '^$' -bench ServedDoc -benchmem
func BenchmarkServedDoc(b *testing.B) {
	it := cpstore.Item{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "dp-1"},
		Doc: dataplaneDoc("dp-1", "v1"), Version: 1, Created: time.Unix(1, 0)}
	b.Run("All", func(b *testing.B) {
		for range b.N {
			if _, err := servedDoc(it); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		for range b.N {
			if _, err := mesh.Decode(it.Key.String(), it.Doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	rs, _ := mesh.Decode(it.Key.String(), it.Doc)
	b.Run("Encode", func(b *testing.B) {
		for range b.N {
			if _, err := cplink.EncodeResource(rs[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
