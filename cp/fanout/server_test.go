package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// served is n Dataplanes of mesh default with bodies of generation gen (names dp-0..).
func servedN(n, gen int) Served {
	sv := NewServed()
	for i := range n {
		sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: fmt.Sprintf("dp-%d", i), Body: fmt.Appendf(nil, "dp %d gen %d", i, gen)})
	}
	return sv
}

func startCP(t *testing.T, sv Served) (*ControlPlane, string) {
	t.Helper()
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.Apply(sv)
	return cp, serve(t, cp)
}

// serve serves cp on a loopback port until the test ends and returns its address.
func serve(t *testing.T, cp *ControlPlane) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, cp, ln)
}

// serveOn serves cp on ln until the test ends and returns its address.
func serveOn(t *testing.T, cp *ControlPlane, ln net.Listener) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Serve(ctx, cp.GRPCServer(nil, 0, 0), ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// agent is a raw delta ADS stream, as the agents' link speaks it.
type agent struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	held   map[string]map[string]string // type URL -> name -> version
	in     chan received
	close  func() // ends the stream and its connection
}

type received struct {
	r   *discovery.DeltaDiscoveryResponse
	err error
}

func dial(t *testing.T, addr, meshName string, held map[string]map[string]string, kinds ...string) *agent {
	t.Helper()
	return dialAs(t, addr, &core.Node{Id: "agent", Cluster: meshName}, held, kinds...)
}

// dialAs is dial with the node given (its client features).
func dialAs(t *testing.T, addr string, node *core.Node, held map[string]map[string]string, kinds ...string) *agent {
	t.Helper()
	return dialWith(t, addr, node, held, nil, kinds...)
}

// dialWith is dialAs with more options for the agent's connection.
func dialWith(t *testing.T, addr string, node *core.Node, held map[string]map[string]string, opts []grpc.DialOption, kinds ...string) *agent {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	closeConn := func() { cancel(); conn.Close() }
	t.Cleanup(closeConn)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, stream: s, held: map[string]map[string]string{}, in: make(chan received, 16), close: closeConn}
	go func() {
		for {
			r, err := s.Recv()
			a.in <- received{r, err}
			if err != nil {
				return
			}
		}
	}()
	for i, k := range kinds {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: cplink.TypeURL(k), InitialResourceVersions: held[cplink.TypeURL(k)]}
		if i == 0 {
			req.Node = node
		}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		a.held[cplink.TypeURL(k)] = map[string]string{}
		for n, v := range held[cplink.TypeURL(k)] {
			a.held[cplink.TypeURL(k)][n] = v
		}
	}
	return a
}

// recv reads one response, applies it to what the agent holds and returns it (not ACKed).
func (a *agent) recv() *discovery.DeltaDiscoveryResponse {
	a.t.Helper()
	select {
	case res := <-a.in:
		if res.err != nil {
			a.t.Fatal(res.err)
		}
		h := a.held[res.r.GetTypeUrl()]
		for _, n := range res.r.GetRemovedResources() {
			delete(h, n)
		}
		for _, r := range res.r.GetResources() {
			var env wrapperspb.BytesValue
			if err := proto.Unmarshal(r.GetResource().GetValue(), &env); err != nil {
				a.t.Fatalf("%s: the envelope is not a BytesValue: %v", r.GetName(), err)
			}
			h[r.GetName()] = r.GetVersion()
		}
		return res.r
	case <-time.After(5 * time.Second):
		a.t.Fatal("no response within 5 s")
		return nil
	}
}

// quiet checks that nothing arrives for a while.
func (a *agent) quiet(d time.Duration) {
	a.t.Helper()
	select {
	case res := <-a.in:
		a.t.Fatalf("unexpected response: %d resources %v, removed %v (%v)", len(res.r.GetResources()), names(res.r), res.r.GetRemovedResources(), res.err)
	case <-time.After(d):
	}
}

func (a *agent) ack(r *discovery.DeltaDiscoveryResponse) {
	a.t.Helper()
	if err := a.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
		a.t.Fatal(err)
	}
}

func names(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	sort.Strings(out)
	return out
}

func TestOneChangeSendsOnlyIt(t *testing.T) {
	cp, addr := startCP(t, servedN(100, 0))
	a := dial(t, addr, "default", nil, mesh.KindDataplane)
	first := a.recv()
	if len(first.GetResources()) != 100 {
		t.Fatalf("first sync: %d resources, want 100", len(first.GetResources()))
	}
	a.ack(first)

	sv := servedN(100, 0)
	sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-7", Body: []byte("dp 7 changed")})
	if u, r := cp.Apply(sv); u != 1 || r != 0 {
		t.Fatalf("Apply: updated %d removed %d, want 1 and 0", u, r)
	}
	r := a.recv()
	if got := names(r); !slices.Equal(got, []string{"dp-7"}) || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after one change got %v removed %v, want [dp-7] only", got, r.GetRemovedResources())
	}
	a.ack(r)

	// A removal: only its name.
	sv = servedN(99, 0)
	sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-7", Body: []byte("dp 7 changed")})
	cp.Apply(sv)
	r = a.recv()
	if len(r.GetResources()) != 0 || !slices.Equal(r.GetRemovedResources(), []string{"dp-99"}) {
		t.Fatalf("after a removal got %v removed %v, want only dp-99 removed", names(r), r.GetRemovedResources())
	}
	a.ack(r)
	// Applying the same again sends nothing.
	cp.Apply(sv)
	a.quiet(200 * time.Millisecond)
	if len(a.held[cplink.TypeURL(mesh.KindDataplane)]) != 99 {
		t.Fatalf("agent holds %d, want 99", len(a.held[cplink.TypeURL(mesh.KindDataplane)]))
	}
}

func TestResumeSendsNothingUnchanged(t *testing.T) {
	cp, addr := startCP(t, servedN(50, 0))
	a := dial(t, addr, "default", nil, mesh.KindDataplane, mesh.KindVirtualOutbound)
	for range 2 {
		a.ack(a.recv())
	}
	held := a.held

	// A replica (another control plane, same content) answers a resumed stream with an empty
	// response per kind: every kind is answered, nothing resent.
	_, addr2 := startCP(t, servedN(50, 0))
	b := dial(t, addr2, "default", held, mesh.KindDataplane, mesh.KindVirtualOutbound)
	for range 2 {
		r := b.recv()
		if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
			t.Fatalf("resumed %s: got %d resources and removed %v, want nothing", r.GetTypeUrl(), len(r.GetResources()), r.GetRemovedResources())
		}
	}

	// Resuming with one stale version and a name that is gone: just those two.
	stale := map[string]map[string]string{cplink.TypeURL(mesh.KindDataplane): {}}
	for n, v := range held[cplink.TypeURL(mesh.KindDataplane)] {
		stale[cplink.TypeURL(mesh.KindDataplane)][n] = v
	}
	stale[cplink.TypeURL(mesh.KindDataplane)]["dp-3"] = "old"
	stale[cplink.TypeURL(mesh.KindDataplane)]["dp-gone"] = "x"
	c := dial(t, addr, "default", stale, mesh.KindDataplane)
	r := c.recv()
	if !slices.Equal(names(r), []string{"dp-3"}) || !slices.Equal(r.GetRemovedResources(), []string{"dp-gone"}) {
		t.Fatalf("resume with a stale and a gone name: got %v removed %v", names(r), r.GetRemovedResources())
	}
	_ = cp
}

func TestChangesWaitForTheACKAndGoTogether(t *testing.T) {
	cp, addr := startCP(t, servedN(10, 0))
	a := dial(t, addr, "default", nil, mesh.KindDataplane)
	first := a.recv() // not ACKed yet
	for gen := 1; gen <= 3; gen++ {
		sv := servedN(10, 0)
		sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: fmt.Sprintf("dp-%d", gen), Body: []byte("changed")})
		if gen == 3 {
			sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-1", Body: []byte("changed")})
			sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "default", Name: "dp-2", Body: []byte("changed")})
		}
		cp.Apply(sv)
	}
	a.quiet(200 * time.Millisecond) // one response in flight per kind
	a.ack(first)
	r := a.recv()
	if got := names(r); !slices.Equal(got, []string{"dp-1", "dp-2", "dp-3"}) {
		t.Fatalf("after the ACK got %v, want the three changed once each", got)
	}
	// The agent now holds exactly what is served.
	want := cp.Resources("default", mesh.KindDataplane)
	if len(a.held[cplink.TypeURL(mesh.KindDataplane)]) != len(want) {
		t.Fatalf("agent holds %d, served %d", len(a.held[cplink.TypeURL(mesh.KindDataplane)]), len(want))
	}
}

func TestMeshesApartMeshlessShared(t *testing.T) {
	sv := NewServed()
	sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "a", Name: "web", Body: []byte("a web")})
	sv.Put(Doc{Kind: mesh.KindDataplane, Mesh: "b", Name: "db", Body: []byte("b db")})
	sv.Put(Doc{Kind: mesh.KindHostnameGenerator, Meshless: true, Name: "all", Body: []byte("global")})
	_, addr := startCP(t, sv)
	a := dial(t, addr, "a", nil, mesh.KindDataplane, mesh.KindHostnameGenerator)
	got := map[string][]string{}
	for range 2 {
		r := a.recv()
		got[cplink.KindOf(r.GetTypeUrl())] = names(r)
	}
	if !slices.Equal(got[mesh.KindDataplane], []string{"web"}) || !slices.Equal(got[mesh.KindHostnameGenerator], []string{"all"}) {
		t.Fatalf("mesh a got %v, want its own Dataplane and the meshless generator", got)
	}
}

func TestNamedSubscriptionsAndUnknownTypesRefused(t *testing.T) {
	_, addr := startCP(t, servedN(1, 0))
	for _, req := range []*discovery.DeltaDiscoveryRequest{
		{TypeUrl: cplink.TypeURL(mesh.KindDataplane), ResourceNamesSubscribe: []string{"dp-0"}},
		{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"},
	} {
		a := dial(t, addr, "default", nil)
		req.Node = &core.Node{Id: "agent", Cluster: "default"}
		if err := a.stream.Send(req); err != nil {
			t.Fatal(err)
		}
		res := <-a.in
		err := res.err
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), req.GetTypeUrl()) {
			t.Fatalf("%v: got %v, want InvalidArgument naming the type URL", req, err)
		}
	}
}

func TestTableLogCompaction(t *testing.T) {
	tb := newTable(mesh.KindDataplane)
	want := map[string][]byte{}
	for i := range 10 {
		want[fmt.Sprint(i)] = []byte("v0")
	}
	tb.sync(want)
	s := &stream{}
	s.mu.Lock() // a wake waits: woken stays set
	defer s.mu.Unlock()
	k := &kindSub{s: s, t: tb}
	if res, _, _ := tb.subscribe(k, nil); len(res) != 10 {
		t.Fatalf("subscribe: %d resources, want 10", len(res))
	}
	held := k.seq.Load()
	// Many changes of one resource: the log is compacted past what every stream holds only.
	for gen := range 3000 {
		want["3"] = fmt.Appendf(nil, "v%d", gen+1)
		tb.sync(want)
	}
	res, removed, _, ok := tb.since(held)
	if !ok || len(res) != 1 || res[0].Name != "3" || len(removed) != 0 {
		t.Fatalf("since the subscription: ok %v, %d resources, removed %v; want only 3", ok, len(res), removed)
	}
	if len(tb.log) < 3000 {
		t.Fatalf("the log was compacted past a stream's position (%d changes left)", len(tb.log))
	}
	k.seq.Store(tb.head())
	want["3"] = []byte("last")
	tb.sync(want)
	if len(tb.log) > 1100 {
		t.Fatalf("the log holds %d changes once every stream has them; want it compacted", len(tb.log))
	}
	res, _, _, ok = tb.since(held) // a position the log no longer reaches
	if ok {
		t.Fatalf("since a compacted position: ok with %d resources, want a resume", len(res))
	}
	if !s.woken.Load() {
		t.Fatal("the stream was not woken by a change")
	}
}

// An agent of a large mesh resumes with every version it holds in one request, over gRPC's
// default 4 MiB: it is answered (the names the control plane does not serve, removed), not
// refused at the transport.
func TestLargeResumeAccepted(t *testing.T) {
	_, addr := startCP(t, servedN(10, 0))
	held := make(map[string]string, 200_000)
	for i := range 200_000 {
		held[fmt.Sprintf("dataplane-of-a-large-mesh-%07d", i)] = "v1"
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: cplink.TypeURL(mesh.KindDataplane), InitialResourceVersions: held,
		Node: &core.Node{Id: "agent", Cluster: "default"}}
	if n := proto.Size(req); n <= 4<<20 {
		t.Fatalf("the request is %d bytes, not over 4 MiB", n)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cplink.MaxResponseBytes)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(req); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatalf("a resume of %d bytes: %v", proto.Size(req), err)
	}
	if len(r.GetRemovedResources()) != len(held) || len(r.GetResources()) != 10 {
		t.Fatalf("got %d resources, %d removed; want the 10 served, %d removed", len(r.GetResources()), len(r.GetRemovedResources()), len(held))
	}
}
