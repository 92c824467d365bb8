package xds

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// shortSocket returns a socket path short enough for sun_path (t.TempDir names are long).
func shortSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "xds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "x.sock")
}

// startServer runs a Server until the test ends and returns it with a connected client.
func startServer(t *testing.T, log *slog.Logger) (*Server, *grpc.ClientConn) {
	t.Helper()
	sock := shortSocket(t)
	srv := NewServer(sock, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind", sock)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, conn
}

func generateScenario(t *testing.T, name string, mutate func(*scenario)) *Resources {
	t.Helper()
	for _, sc := range scenarios() {
		if sc.name != name {
			continue
		}
		if mutate != nil {
			mutate(&sc)
		}
		s, tab := sc.build(t)
		r, err := Generate(s, tab, sc.opts)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Fatalf("no scenario %q", name)
	return nil
}

// deltaClient is a minimal Envoy: one delta ADS stream, one subscription per type.
type deltaClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *core.Node
}

// dialDelta opens a delta ADS stream on conn as node, closed when the test ends.
func dialDelta(t *testing.T, conn *grpc.ClientConn, node *core.Node) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, stream: stream, node: node}
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *deltaClient) recv() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	type result struct {
		r   *discovery.DeltaDiscoveryResponse
		err error
	}
	ch := make(chan result, 1)
	go func() { r, err := c.stream.Recv(); ch <- result{r, err} }()
	select {
	case res := <-ch:
		if res.err != nil {
			c.t.Fatalf("recv: %v", res.err)
		}
		return res.r
	case <-time.After(5 * time.Second):
		c.t.Fatal("no delta response within 5s")
		return nil
	}
}

func names(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.Resources {
		out = append(out, res.Name)
	}
	sort.Strings(out)
	return out
}

func TestDeltaADS(t *testing.T) {
	logs := &testutil.LockedBuffer{}
	srv, conn := startServer(t, slog.New(slog.NewTextHandler(logs, nil)))
	srv.RemovalDelay = 100 * time.Millisecond
	first := generateScenario(t, "outbounds-tproxy", nil)
	if err := srv.Update(first); err != nil {
		t.Fatal(err)
	}
	c := dialDelta(t, conn, &core.Node{Id: "default.mobile-1", Cluster: "mobile"})

	// CDS, then EDS for the EDS clusters, then LDS - Envoy's order - each ACKed.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType})
	cds := c.recv()
	if got, want := names(cds), []string{"backend", "db", "inbound:passthrough", "localhost:8080", "outbound:passthrough"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("CDS = %v, want %v", got, want)
	}
	for _, r := range cds.Resources {
		if r.Version == "" {
			t.Errorf("cluster %s has no version", r.Name)
		}
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: cds.Nonce})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"backend", "db"}})
	eds := c.recv()
	if got := names(eds); strings.Join(got, " ") != "backend db" {
		t.Fatalf("EDS = %v", got)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: eds.Nonce})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType})
	lds := c.recv()
	if len(lds.Resources) != len(first.Listeners) {
		t.Fatalf("LDS sent %d listeners, want %d", len(lds.Resources), len(first.Listeners))
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResponseNonce: lds.Nonce})

	// Same content regenerated (new pointers): no version changes, nothing sent.
	before := srv.Versions()
	if err := srv.Update(generateScenario(t, "outbounds-tproxy", nil)); err != nil {
		t.Fatal(err)
	}
	if after := srv.Versions(); after[resourcev3.ListenerType] != before[resourcev3.ListenerType] || after[resourcev3.ClusterType] != before[resourcev3.ClusterType] {
		t.Fatalf("versions changed without a content change: %v -> %v", before, after)
	}

	// A policy change: a TrafficRoute splits backend. Only what changed is sent: the two
	// backend listeners (IPv4 and IPv6), the new ad-hoc clusters; "db" stays untouched.
	// The now unused "backend" cluster and assignment go after RemovalDelay (make before
	// break: not in the same set as the listener change).
	changed := generateScenario(t, "outbounds-tproxy", func(sc *scenario) {
		sc.res = append(sc.res, trafficRoute("split", 0, tags("service", "mobile"), tags("service", "backend"),
			to(80, tags("service", "backend", "version", "2")), to(20, tags("service", "backend", "version", "3"))))
	})
	if err := srv.Update(changed); err != nil {
		t.Fatal(err)
	}
	got := map[string]*discovery.DeltaDiscoveryResponse{}
	removed := map[string][]string{} // by type, from every response from now on
	for got[resourcev3.ListenerType] == nil || got[resourcev3.ClusterType] == nil {
		r := c.recv()
		got[r.TypeUrl] = r
		removed[r.TypeUrl] = append(removed[r.TypeUrl], r.RemovedResources...)
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	if l := got[resourcev3.ListenerType]; strings.Join(names(l), " ") != "outbound:240.0.0.1:80 outbound:[fd00:fd00::1]:80" {
		t.Errorf("LDS delta = %v, want only the two backend listeners", names(l))
	}
	cd := got[resourcev3.ClusterType]
	if strings.Join(names(cd), " ") != "backend{version=2} backend{version=3}" {
		t.Errorf("CDS delta = %v, want only the two ad-hoc clusters", names(cd))
	}
	if len(cd.RemovedResources) != 0 {
		t.Errorf("CDS removed %v with the listener change, want nothing removed yet", cd.RemovedResources)
	}
	if e := got[resourcev3.EndpointType]; e != nil {
		t.Errorf("EDS delta = %v removed %v, want none (db unchanged, backend's removal later)", names(e), e.RemovedResources)
	}
	// Envoy then subscribes to the new clusters' assignments and gets exactly those.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"backend{version=2}", "backend{version=3}"}})
	for subscribed := false; !subscribed || len(removed[resourcev3.ClusterType]) == 0 || len(removed[resourcev3.EndpointType]) == 0; {
		e := c.recv()
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: e.TypeUrl, ResponseNonce: e.Nonce})
		removed[e.TypeUrl] = append(removed[e.TypeUrl], e.RemovedResources...)
		if e.TypeUrl != resourcev3.EndpointType || len(e.Resources) == 0 {
			continue
		}
		if strings.Join(names(e), " ") != "backend{version=2} backend{version=3}" {
			t.Errorf("EDS after subscribe = %v", names(e))
		}
		subscribed = true
	}
	// Then, once RemovalDelay has passed, the removal of backend alone.
	if strings.Join(removed[resourcev3.ClusterType], " ") != "backend" || strings.Join(removed[resourcev3.EndpointType], " ") != "backend" {
		t.Errorf("removed after the delay: CDS %v, EDS %v; want [backend] each", removed[resourcev3.ClusterType], removed[resourcev3.EndpointType])
	}

	// An invalid set is refused and the last good one stays.
	bad := generateScenario(t, "outbounds-tproxy", nil)
	bad.Listeners[0] = tcpListener(bad.Listeners[0].Name, bad.Listeners[0].Address, false, tcpProxy("x", "ghost", nil))
	v := srv.Versions()
	if err := srv.Update(bad); err == nil || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("invalid update: err = %v", err)
	}
	if after := srv.Versions(); after[resourcev3.ListenerType] != v[resourcev3.ListenerType] {
		t.Error("an invalid update changed the published versions")
	}

	// A NACK from Envoy is logged.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResponseNonce: got[resourcev3.ListenerType].Nonce,
		ErrorDetail: &status.Status{Code: 3, Message: "listener outbound:240.0.0.1:80: rejected by test"}})
	deadline := time.Now().Add(5 * time.Second)
	for srv.NACKs() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if srv.NACKs() != 1 || !strings.Contains(logs.String(), "rejected by test") || !strings.Contains(logs.String(), "NACK") {
		t.Errorf("NACK not counted or logged; nacks=%d logs:\n%s", srv.NACKs(), logs.String())
	}
}

func TestStateOfTheWorldADS(t *testing.T) {
	srv, conn := startServer(t, nil)
	res := generateScenario(t, "route-design-example", nil)
	if err := srv.Update(res); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "default.mobile-1"}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != len(res.Clusters) || resp.VersionInfo != srv.Versions()[resourcev3.ClusterType] {
		t.Fatalf("SotW CDS: %d clusters version %q, want %d version %q", len(resp.Resources), resp.VersionInfo, len(res.Clusters), srv.Versions()[resourcev3.ClusterType])
	}
}

// What is at the socket path before Run: a stale socket (a crashed run) is replaced; a
// socket another process still serves on, or a file that is not a socket, is left alone
// and Run says so - it removed either (the other agent's Envoy lost its xDS server, the
// file was deleted).
func TestRunSocketPathInUse(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "xds")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	run := func(sock string) error {
		ctx, cancel := context.WithCancel(context.Background())
		srv := NewServer(sock, nil)
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		select {
		case <-srv.Ready():
			cancel()
			return <-done
		case err := <-done:
			cancel()
			return err
		case <-time.After(5 * time.Second):
			cancel()
			t.Fatal("Run neither listened nor failed")
			return nil
		}
	}

	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens
	if err := run(stale); err != nil {
		t.Errorf("stale socket: Run = %v, want it replaced", err)
	}

	live := filepath.Join(dir, "live.sock")
	l, err = net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := run(live); err == nil || !strings.Contains(err.Error(), live) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("live socket: Run = %v, want an error naming %s in use", err, live)
	}
	if c, err := net.Dial("unix", live); err != nil {
		t.Errorf("the other server's socket is gone: %v", err)
	} else {
		c.Close()
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: Run = %v, want an error saying it is not a socket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file at the socket path: %q, %v; want it untouched", b, err)
	}
}

// envoyState is what a delta client holds: every resource by type and name, as Envoy does.
type envoyState map[string]map[string]*anypb.Any

func (s envoyState) apply(r *discovery.DeltaDiscoveryResponse) {
	if s[r.TypeUrl] == nil {
		s[r.TypeUrl] = map[string]*anypb.Any{}
	}
	for _, res := range r.Resources {
		s[r.TypeUrl][res.Name] = res.Resource
	}
	for _, n := range r.RemovedResources {
		delete(s[r.TypeUrl], n)
	}
}

// naming lists the client's listeners that name one of the clusters.
func (s envoyState) naming(t *testing.T, clusters []string) []string {
	var out []string
	for name, a := range s[resourcev3.ListenerType] {
		l := &listener.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		tp := &tcpproxy.TcpProxy{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
			t.Fatal(err)
		}
		refs := []string{tp.GetCluster()}
		for _, w := range tp.GetWeightedClusters().GetClusters() {
			refs = append(refs, w.Name)
		}
		for _, c := range refs {
			if slices.Contains(clusters, c) {
				out = append(out, name+" -> "+c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Make before break: after an update that moves listeners off clusters and removes them,
// a cluster must not be removed while the client still has a listener naming it - the
// removal comes after the listeners changed. (go-control-plane sends the types in order
// CDS, EDS, LDS, so a removal in the same set as the listener change came first.) The
// removed clusters go once RemovalDelay has passed.
func TestDeltaMakeBeforeBreak(t *testing.T) {
	srv, conn := startServer(t, nil)
	srv.RemovalDelay = 300 * time.Millisecond
	noRoute := generateScenario(t, "outbounds-tproxy", nil)
	split := generateScenario(t, "outbounds-tproxy", func(sc *scenario) {
		sc.res = append(sc.res, trafficRoute("split", 0, tags("service", "mobile"), tags("service", "backend"),
			to(80, tags("service", "backend", "version", "2")), to(20, tags("service", "backend", "version", "3"))))
	})
	if err := srv.Update(noRoute); err != nil {
		t.Fatal(err)
	}
	c := dialDelta(t, conn, &core.Node{Id: "default.mobile-1"})
	state := envoyState{}
	ack := func(r *discovery.DeltaDiscoveryResponse) {
		if r.TypeUrl == resourcev3.ClusterType {
			if d := state.naming(t, r.RemovedResources); len(d) > 0 {
				t.Errorf("clusters %v removed while the client's listeners name them: %v", r.RemovedResources, d)
			}
		}
		state.apply(r)
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType})
	ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType})
	ack(c.recv())

	// Back and forth: the split removes "backend", the next update brings it back and
	// removes the ad-hoc clusters.
	for i, next := range []*Resources{split, generateScenario(t, "outbounds-tproxy", nil)} {
		if err := srv.Update(next); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, cl := range next.Clusters {
			want[cl.Name] = true
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := c.recv()
			ack(r)
			if len(state[resourcev3.ClusterType]) == len(want) {
				same := true
				for n := range state[resourcev3.ClusterType] {
					same = same && want[n]
				}
				if same {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("update %d: the client's clusters never became the published ones", i)
			}
		}
	}
}
