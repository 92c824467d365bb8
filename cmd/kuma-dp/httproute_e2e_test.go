package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// A Kuma TrafficRoute with HTTP rules and a load balancer, as a user writes it, through the
// real binary to its Envoy (the stand-in): the outbound to the HTTP service is an HTTP
// connection manager routing /v1 to the v1 subset, the clusters carry the load balancer,
// and the resources are published (none refused).
func TestE2EKumaHTTPRouteReachesEnvoy(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, dpFile, testutil.DataplaneWeb+"  transparentProxying:\n    redirectPortInbound: 15006\n    redirectPortOutbound: 15001\n")
	writeFile(t, filepath.Join(policies, "httpbin.yaml"), strings.Replace(testutil.DataplaneHTTPBin, "version: v1", "version: v1\n        kuma.io/protocol: http", 1))
	writeFile(t, filepath.Join(policies, "route.yaml"), `type: TrafficRoute
name: httpbin-http
mesh: default
sources: [{match: {kuma.io/service: web}}]
destinations: [{match: {kuma.io/service: httpbin}}]
conf:
  loadBalancer: {leastRequest: {choiceCount: 3}}
  http:
  - match: {path: {prefix: /v1}}
    modify: {requestHeaders: {add: [{name: x-route, value: v1}]}}
    destination: {kuma.io/service: httpbin, version: v1}
  destination: {kuma.io/service: httpbin}
`)
	report := filepath.Join(t.TempDir(), "envoy-report.jsonl")
	p := startAgentEnv(t, []string{"FAKE_ENVOY_REPORT=" + report}, dpFile, policies,
		"--envoy=true", "--binary-path", fakeEnvoy(t), "--drain-time", "1s")
	waitFor(t, "Envoy receiving listeners", 5*time.Second, func() bool { return len(listenersSeen(readReport(t, report))) > 0 })
	_, body := p.get("/config_dump")
	for _, want := range []string{
		"envoy.filters.network.http_connection_manager",
		`"prefix": "/v1"`,
		`"key": "x-route"`,
		`"name": "httpbin{version=v1}{leastRequest:3}"`,
		`"lbPolicy": "LEAST_REQUEST"`,
		`"upgradeType": "websocket"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/config_dump lacks %s", want)
		}
	}
	if _, m := p.get("/metrics"); !strings.Contains(m, "kuma_dp_envoy_update_failures_total 0") {
		t.Errorf("Envoy's resources were refused:\n%s", lineWith(m, "envoy_update_failures"))
	}
	if t.Failed() {
		t.Logf("%.6000s", body)
	}
}
