package cplink

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kumadp/kuma-dp/mesh"
)

// fakeCP is a delta ADS server on loopback (plain text) standing in for a control plane: it
// answers each kind's first subscription with the resources it holds, sends what push
// gives it, and records the ACKs and NACKs it gets.
type fakeCP struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	t testing.TB

	mu     sync.Mutex
	held   map[string][]*discovery.Resource // kind -> resources
	nacks  []string                         // error details received
	tokens []string                         // authorization headers seen
	// initial holds, per stream, the Dataplane versions the client said it held.
	initial []map[string]string
	// features holds, per stream, the client features its node listed.
	features [][]string
	push     chan *discovery.DeltaDiscoveryResponse
	nonce    int
}

func newFakeCP(t testing.TB, rs ...mesh.Resource) (*fakeCP, string) {
	t.Helper()
	cp := &fakeCP{t: t, held: map[string][]*discovery.Resource{}, push: make(chan *discovery.DeltaDiscoveryResponse, 4)}
	for _, r := range rs {
		cp.held[r.Kind()] = append(cp.held[r.Kind()], cp.resource(r, "1"))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, cp)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return cp, l.Addr().String()
}

func (cp *fakeCP) resource(r mesh.Resource, version string) *discovery.Resource {
	body, err := EncodeResource(r)
	if err != nil {
		cp.t.Fatal(err)
	}
	return cp.raw(r.GetMeta().Name, version, body)
}

func (cp *fakeCP) raw(name, version string, body []byte) *discovery.Resource {
	a, err := anypb.New(Envelope(body))
	if err != nil {
		cp.t.Fatal(err)
	}
	return &discovery.Resource{Name: name, Version: version, Resource: a}
}

func (cp *fakeCP) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		cp.mu.Lock()
		cp.tokens = append(cp.tokens, md.Get("authorization")...)
		cp.mu.Unlock()
	}
	reqs := make(chan *discovery.DeltaDiscoveryRequest)
	go func() {
		defer close(reqs)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			reqs <- req
		}
	}()
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				return nil
			}
			cp.mu.Lock()
			if d := req.GetErrorDetail(); d != nil {
				cp.nacks = append(cp.nacks, d.GetMessage())
			}
			var resp *discovery.DeltaDiscoveryResponse
			if n := req.GetNode(); n != nil {
				cp.features = append(cp.features, n.GetClientFeatures())
			}
			if req.GetResponseNonce() == "" && KindOf(req.GetTypeUrl()) == mesh.KindDataplane {
				cp.initial = append(cp.initial, req.GetInitialResourceVersions())
			}
			if req.GetResponseNonce() == "" { // a subscription: everything of the kind
				cp.nonce++
				resp = &discovery.DeltaDiscoveryResponse{TypeUrl: req.GetTypeUrl(), Nonce: string(rune('a' + cp.nonce)),
					Resources: cp.held[KindOf(req.GetTypeUrl())]}
			}
			cp.mu.Unlock()
			if resp != nil {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		case resp := <-cp.push:
			if err := stream.Send(resp); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (cp *fakeCP) nacked() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

func testDataplane(name, svc, addr string) *mesh.Dataplane {
	return &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: name},
		Networking: mesh.Networking{Address: addr, Inbound: []mesh.Inbound{{Port: 80, Tags: mesh.TagsOf(map[string]string{mesh.ServiceTag: svc})}}}}
}

func nextUpdate(t *testing.T, ch <-chan Update) Update {
	t.Helper()
	select {
	case u := <-ch:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update in 10s")
		return Update{}
	}
}

// The link against a control plane: the first complete sync is the model, a later change
// arrives on Run's channel, a resource that does not decode is NACKed naming it while the
// last good model stays, the token is sent, and the model saved for a restart serves (stale)
// when the control plane is gone.
func TestClientSyncUpdateNack(t *testing.T) {
	cp, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"), testDataplane("backend-1", "backend", "10.0.0.2"))
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model.gob")
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", TokenFile: token, ModelFile: model,
		Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := c.Load(ctx)
	if u.Err != nil || u.Snapshot == nil || u.Snapshot.Self.Name != "web-1" || len(u.Snapshot.Dataplanes) != 2 || u.Stale {
		t.Fatalf("first sync: %+v", u)
	}
	out := make(chan Update, 4)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()

	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "p1",
		Resources: []*discovery.Resource{cp.resource(testDataplane("redis-1", "redis", "10.0.0.3"), "2")}}
	if u := nextUpdate(t, out); u.Err != nil || len(u.Snapshot.Dataplanes) != 3 {
		t.Fatalf("after an added dataplane: %+v", u)
	}
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "p2",
		Resources: []*discovery.Resource{cp.raw("broken-1", "3", []byte("type: Dataplane\nname: broken-1\nmesh: default\nnetworking: [1]\n"))}}
	deadline := time.Now().Add(10 * time.Second)
	for len(cp.nacked()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := cp.nacked(); len(n) != 1 || !strings.Contains(n[0], "broken-1") {
		t.Fatalf("NACKs %q, want one naming broken-1", n)
	}
	if c.Stats().Nacks.Load() != 1 || c.Stats().Sessions.Load() < 1 {
		t.Errorf("stats: %d NACKs, %d sessions", c.Stats().Nacks.Load(), c.Stats().Sessions.Load())
	}
	cp.mu.Lock()
	tokens := cp.tokens
	cp.mu.Unlock()
	if len(tokens) == 0 || tokens[0] != "Bearer secret-token" {
		t.Errorf("authorization sent: %q", tokens)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A restart with the control plane unreachable: the saved model, marked stale.
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(model); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	again, err := NewClient(ClientConfig{Address: "grpc://" + dead, Name: "web-1", ModelFile: model, StaleAfter: -1,
		Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if u := again.Load(ctx2); u.Err != nil || !u.Stale || u.Snapshot == nil || len(u.Snapshot.Dataplanes) != 3 {
		t.Fatalf("restart without the control plane: %+v", u)
	}
	cancel2()
	_ = again.Run(ctx2, make(chan Update, 1)) // stops the link
}

// Bad configurations are refused before anything connects, naming the setting.
func TestNewClientErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  ClientConfig
		want string
	}{
		{ClientConfig{Address: "ftp://cp:5678", Name: "a"}, "scheme must be"},
		{ClientConfig{Address: "grpc://cp", Name: "a"}, "want host:port"},
		{ClientConfig{Address: "grpc://cp:1/x", Name: "a"}, "no path expected"},
		{ClientConfig{Address: ""}, "empty"},
		{ClientConfig{Address: "grpc://cp:1"}, "the dataplane's name is needed"},
		{ClientConfig{Address: "grpcs://cp:1", Name: "a", CACertFile: "/nonexistent/ca.pem"}, "ca.pem"},
	} {
		if _, err := NewClient(tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Cache files: written whole or not at all, by this build.
func TestWriteCacheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.gob")
	if err := WriteCacheFile(path, ".c-*", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".c-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := WriteCacheFile(filepath.Join(t.TempDir(), "no", "such", "dir"), ".c-*", 1); err == nil {
		t.Error("a file in a missing directory was written")
	}
	if BuildID() == "" || BuildID() != BuildID() {
		t.Errorf("build id %q", BuildID())
	}
}

// A dataplane listing reachable services holds only their dataplanes (the others as their
// version, so that a resumed stream does not send them); when its list changes, the link
// reconnects without the versions of those it dropped, and gets the ones the new list adds.
func TestClientKeepsReachableDataplanes(t *testing.T) {
	web := func(version string, reachable ...string) *discovery.Resource {
		dp := testDataplane("web-1", "web", "10.0.0.1")
		dp.Networking.Extra().TransparentProxying = &mesh.TransparentProxying{ReachableServices: reachable}
		return (&fakeCP{t: t}).resource(dp, version)
	}
	cp, addr := newFakeCP(t, testDataplane("backend-1", "backend", "10.0.0.2"), testDataplane("redis-1", "redis", "10.0.0.3"))
	cp.held[mesh.KindDataplane] = append(cp.held[mesh.KindDataplane], web("1", "backend"))
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := func(s *mesh.Snapshot) string {
		var out []string
		for _, dp := range s.Dataplanes {
			out = append(out, dp.Name)
		}
		return strings.Join(out, ",")
	}
	u := c.Load(ctx)
	if u.Err != nil || names(u.Snapshot) != "backend-1,web-1" {
		t.Fatalf("first sync: %v, dataplanes %s", u.Err, names(u.Snapshot))
	}
	c.mu.Lock()
	redis, held := c.held[mesh.KindDataplane]["redis-1"]
	c.mu.Unlock()
	if !held || redis.res != nil || redis.version != "1" {
		t.Fatalf("redis-1 held as %+v (held %v), want its version only", redis, held)
	}
	out := make(chan Update, 4)
	go func() { _ = c.Run(ctx, out) }()

	// The list changes at the control plane: redis instead of backend.
	cp.mu.Lock()
	cp.held[mesh.KindDataplane][2] = web("2", "redis")
	cp.mu.Unlock()
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "p1",
		Resources: []*discovery.Resource{web("2", "redis")}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := nextUpdate(t, out)
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		if names(u.Snapshot) == "redis-1,web-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the list changed: dataplanes %s, want redis-1,web-1", names(u.Snapshot))
		}
	}
	cp.mu.Lock()
	initial := cp.initial
	cp.mu.Unlock()
	if len(initial) < 2 {
		t.Fatalf("%d streams, want a second one after the list changed", len(initial))
	}
	if _, sent := initial[len(initial)-1]["redis-1"]; sent {
		t.Errorf("the new stream announced redis-1 (dropped for the old list) as held: %v", initial[len(initial)-1])
	}
	if v := initial[len(initial)-1]["backend-1"]; v != "1" {
		t.Errorf("the new stream did not announce backend-1 as held: %v", initial[len(initial)-1])
	}
}

// A burst of changes writes the model file once at the first sync and once more, with the
// newest model, when the link stops - not once per change.
func TestClientSavesBurstOnce(t *testing.T) {
	cp, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"))
	model := filepath.Join(t.TempDir(), "model.gob")
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", ModelFile: model, Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if u := c.Load(ctx); u.Err != nil {
		t.Fatalf("first sync: %v", u.Err)
	}
	out := make(chan Update, 8)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	deadline := time.Now().Add(10 * time.Second)
	for c.saves.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for i := 2; i <= 5; i++ {
		name := fmt.Sprintf("svc-%d", i)
		cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: name,
			Resources: []*discovery.Resource{cp.resource(testDataplane(name, name, fmt.Sprintf("10.0.0.%d", i)), "2")}}
		if u := nextUpdate(t, out); u.Err != nil || len(u.Snapshot.Dataplanes) != i {
			t.Fatalf("change %d: %+v", i, u)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := c.saves.Load(); n != 1 {
		t.Fatalf("%d model files written during the burst, want 1 (the first sync's)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := c.saves.Load(); n != 2 {
		t.Fatalf("%d model files written, want 2 (the newest written when the link stopped)", n)
	}
	again, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "web-1", ModelFile: model}, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _, err := again.loadSaved()
	if err != nil || len(snap.Dataplanes) != 5 {
		t.Fatalf("the saved model: %v, %v", snap, err)
	}
}

// unconnectedClient is a link for dataplane name that is handed responses directly
// (handle), its models drained, until the test ends.
func unconnectedClient(tb testing.TB, name string) (*Client, context.Context) {
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: name, Mesh: "default"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go func() {
		for {
			select {
			case <-c.updates:
			case <-ctx.Done():
				return
			}
		}
	}()
	return c, ctx
}

// BenchmarkClientOneChange100k is the link's cost of one changed dataplane in a mesh of
// 100,000: the response applied to what it holds and the model built (the agent's part,
// allocation on, is not in it).
func BenchmarkClientOneChange100k(b *testing.B) {
	c, ctx := unconnectedClient(b, "dp-0")
	cp := &fakeCP{t: b}
	var all []*discovery.Resource
	for i := range 100000 {
		name := fmt.Sprintf("dp-%d", i)
		all = append(all, cp.resource(testDataplane(name, name, "10.0.0.1"), "1"))
	}
	for _, kind := range Kinds {
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(kind), Nonce: "0"}
		if kind == mesh.KindDataplane {
			resp.Resources = all
		}
		if ack := c.handle(ctx, resp); ack.GetErrorDetail() != nil {
			b.Fatal(ack.GetErrorDetail().GetMessage())
		}
	}
	if !c.sent {
		b.Fatal("no model after the first responses")
	}
	i := 0
	for b.Loop() {
		i++
		r := cp.resource(testDataplane("dp-50000", "dp-50000", fmt.Sprintf("10.1.%d.%d", i/250%250, i%250)), strconv.Itoa(i+1))
		ack := c.handle(ctx, &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: strconv.Itoa(i),
			Resources: []*discovery.Resource{r}})
		if ack.GetErrorDetail() != nil {
			b.Fatal(ack.GetErrorDetail().GetMessage())
		}
	}
}

// The model built from the last one and the changes since is the model built from
// everything held, through additions, edits, removals, and a change of the dataplane's
// reachable services.
func TestClientIncrementalModelMatchesFull(t *testing.T) {
	c, ctx := unconnectedClient(t, "me")
	cp := &fakeCP{t: t}
	send := func(kind string, rs []mesh.Resource, removed ...string) {
		t.Helper()
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(kind), Nonce: "n", RemovedResources: removed}
		for _, r := range rs {
			resp.Resources = append(resp.Resources, cp.resource(r, "v"))
		}
		if ack := c.handle(ctx, resp); ack.GetErrorDetail() != nil {
			t.Fatal(ack.GetErrorDetail().GetMessage())
		}
	}
	check := func(what string) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		var all []mesh.Resource
		for _, kind := range Kinds {
			for _, h := range c.held[kind] {
				if h.res != nil {
					all = append(all, h.res)
				}
			}
		}
		self := c.held[mesh.KindDataplane]["me"].res.(*mesh.Dataplane)
		want, err := mesh.NewSnapshot(self, all)
		if err != nil {
			t.Fatal(err)
		}
		got := c.lastSnap
		if got == nil || got.Hash != want.Hash || len(got.Dataplanes) != len(want.Dataplanes) {
			t.Fatalf("%s: the model built from the changes differs from the one built from everything held (%d and %d dataplanes)",
				what, len(got.Dataplanes), len(want.Dataplanes))
		}
	}
	me := func(reach ...string) *mesh.Dataplane {
		dp := testDataplane("me", "me", "10.9.0.1")
		if len(reach) > 0 {
			dp.Networking.Extra().TransparentProxying = &mesh.TransparentProxying{ReachableServices: reach}
		}
		return dp
	}
	var dps []mesh.Resource
	for i := range 600 {
		dps = append(dps, testDataplane(fmt.Sprintf("dp-%03d", i), fmt.Sprintf("svc-%d", i%50), "10.0.0.1"))
	}
	send(mesh.KindDataplane, append(dps, me()))
	for _, kind := range Kinds[1:] {
		send(kind, nil)
	}
	check("first sync")
	send(mesh.KindDataplane, []mesh.Resource{testDataplane("dp-000a", "svc-new", "10.0.0.2")})
	check("one added")
	send(mesh.KindDataplane, []mesh.Resource{testDataplane("dp-300", "svc-0", "10.0.0.3"), testDataplane("zz-last", "svc-1", "10.0.0.4")})
	check("one edited, one added last")
	send(mesh.KindDataplane, nil, "dp-000", "dp-599", "dp-250")
	check("three removed")
	send(mesh.KindDataplane, []mesh.Resource{me("svc-1", "svc-2")})
	check("reachable services listed")
	send(mesh.KindDataplane, []mesh.Resource{testDataplane("dp-777", "svc-2", "10.0.0.5"), testDataplane("dp-778", "svc-3", "10.0.0.6")})
	check("one reachable and one unreachable added")
	send(mesh.KindDataplane, []mesh.Resource{me()})
	check("reachable services no longer listed")
}

// A large mesh's first sync is one response per kind, larger than gRPC's default 4 MiB
// limit on a received message: the agent must take it (it refused it at the transport,
// reconnected and was sent it again, for ever, never ready).
func TestClientTakesResponseOver4MiB(t *testing.T) {
	pad := strings.Repeat("x", 200)
	rs := []mesh.Resource{testDataplane("web-1", "web", "10.0.0.1")}
	for i := range 8000 {
		rs = append(rs, testDataplane(fmt.Sprintf("dp-%s-%d", pad, i), "backend", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)))
	}
	cp, addr := newFakeCP(t, rs...)
	size := 0
	for _, r := range cp.held[mesh.KindDataplane] {
		size += len(r.GetResource().GetValue()) + len(r.GetName())
	}
	if size <= 4<<20 {
		t.Fatalf("the test's response is %d bytes: not over 4 MiB", size)
	}
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := c.Load(ctx)
	if u.Err != nil || u.Snapshot == nil || len(u.Snapshot.Dataplanes) != len(rs) {
		t.Fatalf("a %d-byte first sync: err %v, sessions %d, responses %d", size, u.Err, c.Stats().Sessions.Load(), c.Stats().Responses.Load())
	}
	cancel()
	_ = c.Run(ctx, make(chan Update, 1))
}

// An edit of what the link holds (a response whose model then does not build) is undone
// to exactly what was held before: removals back, replacements reverted, additions gone.
func TestHeldEditUndo(t *testing.T) {
	c, _ := unconnectedClient(t, "me")
	dp := func(name, addr string) heldUpdate {
		return heldUpdate{name: name, h: heldResource{version: addr, res: testDataplane(name, name, addr)}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyLocked(mesh.KindDataplane, []heldUpdate{dp("a", "10.0.0.1"), dp("b", "10.0.0.2")})
	before := maps.Clone(c.held[mesh.KindDataplane])
	c.reachKey = "before"
	e := c.applyLocked(mesh.KindDataplane, []heldUpdate{{name: "a", gone: true}, dp("b", "10.0.0.3"), dp("c", "10.0.0.4")})
	if len(c.held[mesh.KindDataplane]) != 2 || c.held[mesh.KindDataplane]["b"].version != "10.0.0.3" {
		t.Fatalf("the edit was not applied: %v", c.held[mesh.KindDataplane])
	}
	c.reachKey = "after"
	e.undo()
	if !maps.Equal(c.held[mesh.KindDataplane], before) {
		t.Fatalf("after undo: %v, want %v", c.held[mesh.KindDataplane], before)
	}
	if c.reachKey != "before" {
		t.Fatalf("reach key after undo: %q", c.reachKey)
	}
}
