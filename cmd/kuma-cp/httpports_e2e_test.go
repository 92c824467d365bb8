package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A flood of keep-alive connections to the API (one GET /status each, then idle) under a
// small open-files limit: the API holds its share and closes the rest at once, idle ones
// when --http-idle-timeout passes; meanwhile /ready answers and an agent is served - the
// agents' port keeps its descriptors. Before, the API held every connection for ever and
// the process ran out of descriptors on every port (accept4: too many open files).
func TestE2EAPIFloodLeavesAgentsServed(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) not installed: it runs kuma-cp under a small open-files limit")
	}
	e := meshEnv(t)
	e.wrap = []string{prlimit, "--nofile=512:512"}
	if err := writeFileAtomic(e.path("admin.token"), "admin-secret\n"); err != nil {
		t.Fatal(err)
	}
	e.start("--admin-token-file", e.path("admin.token"), "--api-address", "127.0.0.1:0", "--http-idle-timeout", "3s")
	// 512 descriptors: 256 kept, the API's share an eighth of the rest (32), the metrics' a
	// thirty-second (8), the agents' what remains.
	const flood = 600
	var conns []net.Conn
	served := 0
	for range flood {
		c, err := net.Dial("tcp", e.api)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /status HTTP/1.1\r\nHost: cp\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == 200 {
			served++
		}
	}
	if served == flood || served == 0 {
		t.Fatalf("%d of %d connections served: want the API's share only", served, flood)
	}
	metrics := "http://" + e.metrics + "/metrics"
	if body := httpGet(t, "http://"+e.metrics+"/ready"); !strings.Contains(body, "READY") {
		t.Fatalf("/ready during the flood: %q", body)
	}
	page := httpGet(t, metrics)
	if v := metricValue(page, `kuma_cp_api_connections_refused_total{limit="total"}`); v < flood-float64(served)-1 {
		t.Errorf("refused %v, want the %d not served counted", v, flood-served)
	}
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("an agent is not served during the API flood")
	}
	waitFor(t, "the idle API connections closed", 15*time.Second, func() bool {
		return metricValue(httpGet(t, metrics), "kuma_cp_api_connections_open") == 0
	})
}
