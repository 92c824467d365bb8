package main

import (
	"context"
	"log/slog"
	"net"
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
