package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cplink"
)

// inProcessCP is the control plane run inside the test (plain text, no tokens), on addr
// ("127.0.0.1:0" for any port); stop ends it as a crash would (streams cut).
type inProcessCP struct {
	cp   *fanout.ControlPlane
	st   *dirstore.Dir
	addr string
	stop func()
}

func startInProcessCP(t testing.TB, dir, addr string) *inProcessCP {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	st := dirstore.New(dir, true, log)
	cp := fanout.New(nil, log)
	sv, _ := st.Scan()
	cp.Apply(sv)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cp.Serve(ctx, cp.GRPCServer(nil, 0, 0), ln) }()
	p := &inProcessCP{cp: cp, st: st, addr: ln.Addr().String()}
	p.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(p.stop)
	return p
}

// rescan serves what changed in the directory now (the watcher's step, without its timer).
func (p *inProcessCP) rescan() { p.st.Refresh(p.cp) }

func startClient(t testing.TB, addr, name string) (*cplink.Client, <-chan cplink.Update) {
	t.Helper()
	c, err := cplink.NewClient(cplink.ClientConfig{Address: "grpc://" + addr, Name: name, Mesh: "default",
		Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := c.Load(ctx)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	out := make(chan cplink.Update, 16)
	out <- first
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, out) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, out
}

// An agent gets its mesh only; after a control-plane restart it resumes with the versions it
// holds and nothing unchanged is sent again; a change made meanwhile arrives alone.
func TestResumeSendsNothingUnchanged(t *testing.T) {
	e := meshEnv(t)
	cp := startInProcessCP(t, e.resources, "127.0.0.1:0")
	c, updates := startClient(t, cp.addr, "web-1")
	first := <-updates
	// mesh default: web-1, httpbin-1 and the VirtualOutbound; mesh other's two are not sent.
	if got := c.Stats().Resources.Load(); got != 3 {
		t.Fatalf("first sync received %d resources, want the 3 of mesh default", got)
	}
	if first.Snapshot.Mesh != "default" || len(first.Snapshot.Dataplanes) != 2 {
		t.Fatalf("first model: mesh %q, %d dataplanes", first.Snapshot.Mesh, len(first.Snapshot.Dataplanes))
	}

	addr := cp.addr
	cp.stop()
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.resumed.mesh"))
	responses := c.Stats().Responses.Load()
	cp2 := startInProcessCP(t, e.resources, addr) // a fresh control plane: it knows nothing of the agent
	select {
	case u := <-updates:
		if u.Err != nil || len(u.Snapshot.VirtualOutbounds) != 1 || u.Snapshot.VirtualOutbounds[0].Conf.Host != "{{service}}.{{version}}.resumed.mesh" {
			t.Fatalf("after the restart: %+v", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update after the restart")
	}
	waitFor(t, "every kind answered on the new stream", 5*time.Second, func() bool {
		return c.Stats().Responses.Load() >= responses+int64(len(cplink.Kinds))
	})
	if got := c.Stats().Resources.Load(); got != 4 {
		t.Errorf("resources received in all: %d, want 4 (3, then only the changed VirtualOutbound)", got)
	}
	if c.Stats().Sessions.Load() != 2 {
		t.Errorf("sessions: %d, want 2", c.Stats().Sessions.Load())
	}

	// One more change: one resource, nothing else.
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.again.mesh"))
	cp2.rescan()
	select {
	case u := <-updates:
		if u.Snapshot == nil || u.Snapshot.VirtualOutbounds[0].Conf.Host != "{{service}}.{{version}}.again.mesh" {
			t.Fatalf("second change: %+v", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update for the second change")
	}
	if got := c.Stats().Resources.Load(); got != 5 {
		t.Errorf("resources received in all: %d, want 5", got)
	}
}

// An agent whose dataplane lists reachable services against a real control plane: it holds
// only their dataplanes; when its list changes at the control plane, it reconnects without
// the versions of those it dropped and is sent exactly the ones the new list adds.
func TestReachableServicesOverTheLink(t *testing.T) {
	e := newCPEnv(t)
	dp := func(name, svc, addr, reach string) string {
		s := fmt.Sprintf("type: Dataplane\nmesh: default\nname: %s\nnetworking:\n  address: %s\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: %s\n", name, addr, svc)
		if reach != "" {
			s += "  transparentProxying:\n    reachableServices: [" + reach + "]\n"
		}
		return s
	}
	e.write("web.yaml", dp("web-1", "web", "10.0.0.1", "db"))
	e.write("db.yaml", dp("db-1", "db", "10.0.0.2", ""))
	e.write("redis.yaml", dp("redis-1", "redis", "10.0.0.3", ""))
	cp := startInProcessCP(t, e.resources, "127.0.0.1:0")
	c, updates := startClient(t, cp.addr, "web-1")
	names := func(u cplink.Update) string {
		if u.Err != nil || u.Snapshot == nil {
			t.Fatalf("update: %+v", u)
		}
		var out []string
		for _, d := range u.Snapshot.Dataplanes {
			out = append(out, d.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(<-updates); got != "db-1,web-1" {
		t.Fatalf("first model: dataplanes %s, want db-1,web-1", got)
	}
	if got := c.Stats().Resources.Load(); got != 3 {
		t.Fatalf("first sync received %d resources, want 3", got)
	}

	e.write("web.yaml", dp("web-1", "web", "10.0.0.1", "redis"))
	cp.rescan()
	deadline := time.After(10 * time.Second)
	for got := ""; got != "redis-1,web-1"; {
		select {
		case u := <-updates:
			got = names(u)
		case <-deadline:
			t.Fatalf("after the list changed: dataplanes %s, want redis-1,web-1", got)
		}
	}
	// web-1 changed, then the new stream sent redis-1 alone: db-1 (kept as its version) and
	// the other kinds were not sent again.
	if got := c.Stats().Resources.Load(); got != 5 {
		t.Errorf("resources received in all: %d, want 5 (3, web-1, redis-1)", got)
	}
	if got := c.Stats().Sessions.Load(); got != 2 {
		t.Errorf("sessions: %d, want 2", got)
	}
}
