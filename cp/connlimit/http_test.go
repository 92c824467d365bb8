package connlimit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startHTTP serves a handler answering "ok" within cfg on a free port.
func startHTTP(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	s, err := ListenHTTP("127.0.0.1:0", cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// closedWithin reports whether the server closes c within d (a read sees EOF or a reset).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	ne, isNet := err.(net.Error)
	return err != nil && !(isNet && ne.Timeout())
}

// An HTTP port closes a keep-alive connection left idle after a request, and one that
// sends no request at all; over the per-IP limit a connection is closed at once. Idle
// connections were held for ever: 19,980 of them ran the process out of descriptors.
func TestHTTPPortClosesIdleConnections(t *testing.T) {
	s := startHTTP(t, HTTPConfig{Limits: Limits{PerIP: 3}, HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	idle, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET /status HTTP/1.1\r\nHost: cp\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("a keep-alive request: %v %v", resp, err)
	}
	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	third, _ := net.Dial("tcp", s.Addr().String())
	defer third.Close()
	over, _ := net.Dial("tcp", s.Addr().String())
	defer over.Close()
	if !closedWithin(over, 5*time.Second) {
		t.Error("a fourth connection from one IP was held")
	}
	for name, c := range map[string]net.Conn{"idle after a request": idle, "silent": silent} {
		if !closedWithin(c, 10*time.Second) {
			t.Errorf("the %s connection is held after its timeout", name)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats.Open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Stats.Open.Load(); n != 0 || s.Stats.RefusedPerIP.Load() != 1 {
		t.Errorf("open %d, refused per IP %d; want 0 and 1", n, s.Stats.RefusedPerIP.Load())
	}
}

// Share leaves the agents' port what the HTTP ports' limits and the reserve leave of the
// open-files limit, shrinks the HTTP ports' defaults on a small limit, and keeps what the
// operator gave.
func TestShareKeepsTheAgentsPortDescriptors(t *testing.T) {
	none := func(string) bool { return false }
	for _, tc := range []struct {
		nofile                       uint64
		given                        func(string) bool
		agents, api, metrics         int
		wantAgents, wantAPI, wantMet int
	}{
		{1 << 20, none, 0, 1024, 64, 16384, 1024, 64},
		{20000, none, 0, 1024, 64, 16384, 1024, 64},
		{10000, none, 0, 1024, 64, 10000 - 256 - 1024 - 64, 1024, 64},
		{1024, none, 0, 1024, 64, 768 - 96 - 24, 96, 24},
		{300, none, 0, 1024, 64, 64, 5, 1},
		{20000, func(f string) bool { return f == "max-connections" || f == "api-max-connections" }, 500, 0, 64, 500, 0, 64},
	} {
		agents, api, metrics := tc.agents, Limits{Total: tc.api}, Limits{Total: tc.metrics}
		Share(tc.nofile, &agents, &api, &metrics, tc.given)
		if agents != tc.wantAgents || api.Total != tc.wantAPI || metrics.Total != tc.wantMet {
			t.Errorf("nofile %d: agents %d api %d metrics %d, want %d %d %d", tc.nofile, agents, api.Total, metrics.Total, tc.wantAgents, tc.wantAPI, tc.wantMet)
		}
		if tc.nofile >= 1024 && agents+api.Total+metrics.Total+Reserve > int(tc.nofile) {
			t.Errorf("nofile %d: the limits add up to more descriptors than the process has", tc.nofile)
		}
	}
}

func TestHTTPConfigCheckNamesTheFlag(t *testing.T) {
	bad := DefaultAPI
	bad.PerIP = -1
	if err := bad.Check("--api-"); err == nil || !strings.Contains(err.Error(), "--api-max-connections-per-ip -1") {
		t.Errorf("%v", err)
	}
	bad = DefaultMetrics
	bad.IdleTimeout = 0
	if err := bad.Check("--metrics-"); err == nil || !strings.Contains(err.Error(), "--http-idle-timeout") {
		t.Errorf("%v", err)
	}
	if err := DefaultAPI.Check("--api-"); err != nil {
		t.Error(err)
	}
}
