package cplink

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/kumadp/kuma-dp/mesh"
)

// A control plane that misbehaves within a stream: an unknown type URL is NACKed naming
// it, a removal of a resource never sent is ACKed and changes nothing, this dataplane's
// own Dataplane removed (no dataplane file) keeps the last model and re-added serves again.
func TestClientOddResponses(t *testing.T) {
	cp, out := runClient(t, testDataplane("web-1", "web", "10.0.0.1"), testDataplane("backend-1", "backend", "10.0.0.2"))
	waitNacks := func(n int) []string {
		deadline := time.Now().Add(10 * time.Second)
		for len(cp.nacked()) < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return cp.nacked()
	}
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Nonce: "u1"}
	if n := waitNacks(1); len(n) != 1 || !strings.Contains(n[0], "envoy.config.cluster.v3.Cluster") {
		t.Fatalf("unknown type URL: NACKs %q", n)
	}
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "u2", RemovedResources: []string{"never-sent"}}
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "u3", RemovedResources: []string{"web-1"}}
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "u4",
		Resources: []*discovery.Resource{cp.resource(testDataplane("web-1", "web", "10.0.0.9"), "2")}}
	u := nextUpdate(t, out)
	if u.Err != nil || u.Snapshot.Self.Networking.Address != "10.0.0.9" || len(u.Snapshot.Dataplanes) != 2 {
		t.Fatalf("after the removals and the re-added self: %+v", u)
	}
	select {
	case u := <-out:
		t.Fatalf("an update besides the re-added self: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
	if n := cp.nacked(); len(n) != 1 {
		t.Errorf("NACKs %q, want only the unknown type URL's", n)
	}
}

// A response NACKed for one bad resource carried good ones too, and the control plane
// counts them delivered: once a later response of the kind is accepted (the fix), the link
// must fetch what it refused with the bad one - it served the fix without them, for as
// long as the stream lived, both sides believing they were in sync.
func TestClientRefetchesWhatANackDropped(t *testing.T) {
	cp, out := runClient(t, testDataplane("web-1", "web", "10.0.0.1"))
	redis := cp.resource(testDataplane("redis-1", "redis", "10.0.0.3"), "2")
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "n1", Resources: []*discovery.Resource{
		redis, cp.raw("broken-1", "3", []byte("type: Dataplane\nname: broken-1\nmesh: default\nnetworking: [1]\n"))}}
	deadline := time.Now().Add(10 * time.Second)
	for len(cp.nacked()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	fixed := cp.resource(testDataplane("broken-1", "broken", "10.0.0.4"), "4")
	cp.mu.Lock() // what the control plane holds now, and sends a new stream
	cp.held[mesh.KindDataplane] = append(cp.held[mesh.KindDataplane], redis, fixed)
	cp.mu.Unlock()
	cp.push <- &discovery.DeltaDiscoveryResponse{TypeUrl: TypeURL(mesh.KindDataplane), Nonce: "n2", Resources: []*discovery.Resource{fixed}}
	for {
		u := nextUpdate(t, out)
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		names := map[string]bool{}
		for _, dp := range u.Snapshot.Dataplanes {
			names[dp.Name] = true
		}
		if names["redis-1"] && names["broken-1"] {
			return
		}
		if !names["broken-1"] {
			t.Fatalf("the fix is not in the model: %v", names)
		}
		// the fix alone: redis-1 must follow
	}
}

// The dataplane file edited to another dataplane, then SIGHUP, with the identity taken from
// the file at start (no --name): refused naming the file and both names, not a --name the
// operator never gave.
func TestClientReloadOfAnotherIdentityNamed(t *testing.T) {
	dir := t.TempDir()
	dp := filepath.Join(dir, "dp.yaml")
	body := "type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: web\n"
	if err := os.WriteFile(dp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", DataplaneFile: dp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range [][2]string{{"name: web-1", "name: web-2"}, {"mesh: default", "mesh: other"}} {
		if err := os.WriteFile(dp, []byte(strings.Replace(body, edit[0], edit[1], 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		err := c.loadSelf()
		if err == nil || strings.Contains(err.Error(), "--name") || strings.Contains(err.Error(), "--mesh") ||
			!strings.Contains(err.Error(), dp) || !strings.Contains(err.Error(), "restart") {
			t.Errorf("%s: %v", edit[1], err)
		}
	}
}

// Two replicas, the first frozen (a stopped process: the kernel accepts its connections,
// nothing answers): the link is served by the second once a connection's handshake has
// waited the keepalive timeout - it waited for the first keepalive as well (15 s with the
// defaults, 10 s here).
func TestClientFrozenReplicaFailsOver(t *testing.T) {
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close() // never accepted: connections wait in the backlog, as with SIGSTOP
	_, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"))
	c, err := NewClient(ClientConfig{Address: "grpc://" + frozen.Addr().String() + ",grpc://" + addr, Name: "web-1",
		Backoff: 10 * time.Millisecond, KeepaliveInterval: 10 * time.Second, KeepaliveTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if u := c.Load(ctx); u.Err != nil {
		t.Fatalf("no model: %v", u.Err)
	}
	// The handshake's wait is the keepalive timeout (1 s); the defect waited the interval
	// (10 s) as well. 8 s tells them apart with room for a loaded machine.
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("served by the second replica after %v", took)
	} else {
		t.Logf("served by the second replica after %v", took)
	}
}

// runClient starts a fake control plane serving rs and a link for web-1 to it, through its
// first sync; the link runs, sending its updates to out, until the test ends.
func runClient(t *testing.T, rs ...mesh.Resource) (cp *fakeCP, out chan Update) {
	t.Helper()
	cp, addr := newFakeCP(t, rs...)
	_, out = runLink(t, addr)
	return cp, out
}

// runLink starts a link for web-1 to the control plane at addr, through its first sync;
// it runs, sending its updates to out, until the test ends.
func runLink(t *testing.T, addr string) (c *Client, out chan Update) {
	t.Helper()
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", Backoff: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if u := c.Load(ctx); u.Err != nil {
		t.Fatal(u.Err)
	}
	out = make(chan Update, 4)
	go func() { _ = c.Run(ctx, out) }()
	return c, out
}
