package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stop ends the process as an operator's restart does (SIGTERM) and waits for it.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited():
	case <-time.After(15 * time.Second):
		p.t.Fatalf("%s did not stop within 15 s of SIGTERM:\n%s", p.Name, p.Logs)
	}
}

// The parts as an operator runs them: kuma-cp on etcd with a router shard and a user route,
// the shard's gateway agent connected; the control plane stops, and the gateway's agent,
// restarted during the outage, answers the shard's and the route's names from the model it
// saved (Routers and DNSZones included: their saves failed, and a restarted agent had no
// model at all, or one from before the first Router).
func TestE2EGatewayRestartedDuringOutageAnswersRouteNames(t *testing.T) {
	env := newShardEnv(t, 3)
	env.put(t, "Router", "shard1", shardRouter)
	env.put(t, "Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	env.put(t, "Dataplane", "gw-2", gatewayDP("gw-2", "10.1.0.2"))
	env.put(t, "Route", "shop", userRoute)
	cp, _, addr := env.startCPProc(t, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test")
	work := t.TempDir()
	args := []string{"--name", "gw-1", "--work-dir", work}
	gw := startAgent(t, env.e, addr, true, args...)
	// gw-1's agent holds a stream: only it is ready, in the zones sent to every agent.
	names := []string{"x.shard1.apps.test", "router-shard1.shard1.apps.test", "www.acme.test"}
	answered := func(a *agent) bool {
		for _, n := range names {
			if !slices.Equal(a.query(n), []string{"10.1.0.1"}) {
				return false
			}
		}
		return true
	}
	waitFor(t, "the gateway's agent answering the route names with the ready replica", 10*time.Second, func() bool { return answered(gw) })
	if m := httpGet(t, gw.admin()+"/metrics"); metricValue(m, "kuma_dp_model_save_failures_total") != 0 {
		t.Fatalf("saves failed:\n%s", gw.Logs)
	}
	gw.stop() // the newest model is saved when the agent stops
	if gw.Count("cannot save the model") > 0 {
		t.Fatalf("the model was not saved:\n%s", gw.Logs)
	}
	cp.stop()

	again := startAgent(t, env.e, addr, true, args...)
	if !answered(again) {
		for _, n := range names {
			t.Errorf("%s: %v, want [10.1.0.1]", n, again.query(n))
		}
		t.Fatal("restarted during the outage: the route names are not answered from the saved model")
	}
	admin := again.admin()
	if body := httpGet(t, admin+"/ready"); !strings.Contains(body, "stale") {
		t.Errorf("/ready does not say the model is stale: %q", body)
	}
	if _, err := os.Stat(filepath.Join(work, "cp-model.gob")); err != nil {
		t.Fatal(err)
	}
}
