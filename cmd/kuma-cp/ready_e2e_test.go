package main

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/certs"
)

// shardReplica is a kuma-cp replica on the shard environment's etcd, serving shard DNS.
type shardReplica struct {
	*proc
	dns, link, api string
}

func (s *shardEnv) startReplica(t *testing.T, id string) *shardReplica {
	t.Helper()
	tok := s.e.path("admin.token")
	if err := writeFileAtomic(tok, "admin-secret\n"); err != nil {
		t.Fatal(err)
	}
	cpBin, _ := binaries(t)
	ready := filepath.Join(t.TempDir(), "ready.json")
	p := startProc(t, "kuma-cp "+id, cpBin, "serve", "--store", "etcd", "--etcd-endpoints", strings.Join(s.c.Endpoints(), ","),
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--dns-address", "127.0.0.1:0",
		"--admin-token-file", tok, "--replica-id", id, "--leader-lease-ttl", "2s",
		"--tls-cert-file", s.e.path(certs.TLSCertFile), "--tls-key-file", s.e.path(certs.TLSKeyFile), "--token-key-file", s.e.path(certs.TokenKeyFile),
		"--ready-file", ready, "--log-level", "debug")
	var r struct{ DNS, Address, API, Metrics string }
	p.readyJSON(ready, &r)
	p.metrics = r.Metrics
	return &shardReplica{proc: p, dns: r.DNS, link: r.Address, api: r.API}
}

// One readiness, shown and served alike, with real agents as a router's replicas: gw-1 (an
// inbound carrying the router's tags) holds a stream to kuma-cp replica 1, gw-2 (a Kuma
// gateway dataplane: networking.gateway.tags) to replica 2. Both replicas' DNS, gw-1's own
// resolver, the Router's status, `kuma-cp get routers`, `describe router` and
// kuma_cp_router_replicas say the same at every step:
//   - gw-2's agent frozen (SIGSTOP; its connection stays open): out of every answer within
//     10 s (it stayed ~40 s: the agents' keepalive was 30 + 10 s), Degraded naming it,
//     Available still true; continued (SIGCONT): back within 10 s, Degraded false;
//   - gw-2's agent killed: Degraded naming it, Available still true; gw-1's too: Available
//     false, the DNS answers both (fail static); gw-1 back: Available again, still
//     Degraded; gw-2 back: the conditions clear.
func TestE2EOneReadinessShownAndServed(t *testing.T) {
	env := newShardEnv(t, 3)
	env.put(t, "Router", "shard1", "type: Router\nmesh: default\nname: shard1\ndns: shard1.apps.test\nreplicas: 2\ndataplanes: {kuma.io/service: gateway-1}\n")
	env.put(t, "Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	env.put(t, "Dataplane", "gw-2", "type: Dataplane\nmesh: default\nname: gw-2\nnetworking:\n  address: 10.1.0.2\n  gateway:\n    type: BUILTIN\n    tags: {kuma.io/service: gateway-1}\n")
	r1 := env.startReplica(t, "replica-1")
	r2 := env.startReplica(t, "replica-2")
	e := env.e
	api := "http://" + r1.api
	gateway := func(cp *shardReplica, name string) *agent {
		return startAgent(t, e, cp.link, true, "--name", name, "--dataplane-token-file", e.token(name, "default"))
	}
	gw1, gw2 := gateway(r1, "gw-1"), gateway(r2, "gw-2")
	const name = "x.shard1.apps.test"
	both, one := []string{"10.1.0.1", "10.1.0.2"}, []string{"10.1.0.1"}
	// served: what each replica's DNS and gw-1's resolver answer, the same for all or nil
	resolver := gw1
	served := func() []string {
		a, b := benchAddrs(r1.dns, name), benchAddrs(r2.dns, name)
		c := resolver.query(name)
		slices.Sort(c)
		if !slices.Equal(a, b) || !slices.Equal(a, c) {
			return nil
		}
		return a
	}
	shown := func() (get, describe string) {
		return e.kumaCP("get", "routers", "--api-url", api), e.kumaCP("describe", "router", "shard1", "--api-url", api)
	}
	replicasMetric := func(state string) float64 {
		for _, r := range []*shardReplica{r1, r2} { // the leader's
			m := httpGet(t, "http://"+r.metrics+"/metrics")
			if v := metricValue(m, `kuma_cp_router_replicas{mesh="default",router="shard1",state="`+state+`"}`); v >= 0 {
				return v
			}
		}
		return -1
	}
	waitFor(t, "both gateways ready everywhere", 20*time.Second, func() bool {
		get, _ := shown()
		return slices.Equal(served(), both) && strings.Contains(get, "2/2    True       False")
	})
	if v := replicasMetric("ready"); v != 2 {
		t.Errorf("kuma_cp_router_replicas ready = %v, want 2", v)
	}

	if err := gw2.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the frozen gateway out of every answer", 10*time.Second, func() bool { return slices.Equal(served(), one) })
	t.Logf("a frozen gateway agent left every answer in %v", took)
	get, describe := shown()
	for _, want := range []string{"shard1  shard1.apps.test", "1/2    True       True"} {
		if !strings.Contains(get, want) {
			t.Errorf("get routers while the DNS serves gw-1 alone lacks %q:\n%s", want, get)
		}
	}
	for _, want := range []string{"gw-1\t10.1.0.1\tready", "gw-2\t10.1.0.2\tnot ready: AgentNotConnected",
		"Condition:        Available=True ReplicasReady: 1 of 2 desired replicas ready",
		"Condition:        Degraded=True FewerReadyReplicas: 1 of 2 desired replicas ready; not ready: gw-2 (AgentNotConnected)"} {
		if !strings.Contains(describe, want) {
			t.Errorf("describe router lacks %q:\n%s", want, describe)
		}
	}
	if r, nr := replicasMetric("ready"), replicasMetric("not_ready"); r != 1 || nr != 1 {
		t.Errorf("kuma_cp_router_replicas ready %v not_ready %v, want 1 and 1", r, nr)
	}

	if err := gw2.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	took = waitFor(t, "the continued gateway back in every answer", 10*time.Second, func() bool { return slices.Equal(served(), both) })
	t.Logf("the continued gateway agent was back in every answer in %v", took)
	waitFor(t, "Degraded cleared", 5*time.Second, func() bool {
		_, d := shown()
		return strings.Contains(d, "Degraded=False")
	})

	gw2.Kill()
	waitFor(t, "one replica killed: degraded, naming it, still available", 10*time.Second, func() bool {
		_, d := shown()
		return slices.Equal(served(), one) && strings.Contains(d, "Available=True") &&
			strings.Contains(d, "Degraded=True FewerReadyReplicas: 1 of 2 desired replicas ready; not ready: gw-2 (AgentNotConnected)")
	})
	gw1.Kill()
	waitFor(t, "no replica ready: not available, the DNS fail static", 10*time.Second, func() bool {
		_, d := shown()
		return strings.Contains(d, "Available=False NoReadyReplicas: no replica ready: its DNS keeps answering all 2 (fail static)") &&
			slices.Equal(benchAddrs(r1.dns, name), both) && slices.Equal(benchAddrs(r2.dns, name), both)
	})
	resolver = gateway(r2, "gw-1")
	waitFor(t, "gw-1 back: available again", 10*time.Second, func() bool {
		get, _ := shown()
		return slices.Equal(benchAddrs(r1.dns, name), one) && slices.Equal(benchAddrs(r2.dns, name), one) && strings.Contains(get, "1/2    True       True")
	})
	if v := replicasMetric("desired"); v != 2 {
		t.Errorf("kuma_cp_router_replicas desired = %v, want 2", v)
	}
	gateway(r1, "gw-2")
	waitFor(t, "both back: the conditions clear", 10*time.Second, func() bool {
		get, d := shown()
		return slices.Equal(served(), both) && strings.Contains(get, "2/2    True       False") &&
			strings.Contains(d, "Available=True ReplicasReady") && strings.Contains(d, "Degraded=False ReplicasReady")
	})
}

// A gateway agent cut off without its connection closing (a relay that stops forwarding
// and holds new connections too, as a partition does) leaves the router's answers within
// 10 s too, named not ready in the status; the partition healed, its agent (which noticed
// with its own keepalive, 1 s here) connects again and is back within 10 s.
func TestE2EPartitionedGatewayLeavesAndComesBack(t *testing.T) {
	env := newShardEnv(t, 1)
	env.put(t, "Router", "shard1", shardRouter)
	env.put(t, "Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	env.put(t, "Dataplane", "gw-2", gatewayDP("gw-2", "10.1.0.2"))
	cp := env.startReplica(t, "replica-1")
	e := env.e
	relay := newStallProxy(t, cp.link)
	startAgent(t, e, relay.addr(), true, "--name", "gw-1", "--dataplane-token-file", e.token("gw-1", "default"), "--cp-keepalive-interval", "1s")
	startAgent(t, e, cp.link, true, "--name", "gw-2", "--dataplane-token-file", e.token("gw-2", "default"))
	const name = "x.shard1.apps.test"
	both, one := []string{"10.1.0.1", "10.1.0.2"}, []string{"10.1.0.2"}
	waitFor(t, "both ready", 20*time.Second, func() bool { return slices.Equal(benchAddrs(cp.dns, name), both) })
	relay.partition()
	took := waitFor(t, "the cut-off gateway out of the answers", 10*time.Second, func() bool {
		return slices.Equal(benchAddrs(cp.dns, name), one)
	})
	t.Logf("a cut-off gateway agent left the answers in %v", took)
	d := e.kumaCP("describe", "router", "shard1", "--api-url", "http://"+cp.api)
	if !strings.Contains(d, "gw-1\t10.1.0.1\tnot ready: AgentNotConnected") {
		t.Errorf("describe router while gw-1 is cut off:\n%s", d)
	}
	relay.heal()
	took = waitFor(t, "the gateway back over a new connection", 10*time.Second, func() bool {
		return slices.Equal(benchAddrs(cp.dns, name), both)
	})
	t.Logf("it was back in %v", took)
}
