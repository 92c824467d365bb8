package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/cp/certs"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

const shardRouter = `type: Router
mesh: default
name: shard1
dns: shard1.apps.test
dataplanes: {kuma.io/service: gateway-1}
`

func gatewayDP(name, ip string) string {
	return "type: Dataplane\nmesh: default\nname: " + name + "\nnetworking:\n  address: " + ip + "\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: gateway-1\n"
}

const userRoute = `type: Route
mesh: default
name: shop
namespace: acme
host: www.acme.test
dnsType: user
to: {service: web, port: 8080}
status:
  phase: scheduled
  router: shard1
  dns: www.acme.test
  ingress:
  - router: shard1
    host: www.acme.test
    conditions: [{type: Admitted, status: "True"}]
`

// kuma-cp serve --dns-address answers for the shards from the store: the zone of a Router
// holds its gateway dataplanes' addresses, a user route's name is one CNAME chased to them, a
// new gateway joins the answer after a write, and names outside are refused.
func TestE2EShardDNSFromTheStore(t *testing.T) {
	env := newShardEnv(t, 3)
	c, e := env.c, env.e
	st := env.st
	ctx := context.Background()
	for _, d := range []struct{ typ, name, doc string }{
		{"Router", "shard1", shardRouter},
		{"Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1")},
		{"Route", "shop", userRoute},
	} {
		env.put(t, d.typ, d.name, d.doc)
	}
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(t, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test")
	ask := func(name string, qtype uint16) *dns.Msg {
		resp, err := query(r.DNS, name, qtype, false)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	addrs := answerAddrs
	waitFor(t, "the shard's zone", 10*time.Second, func() bool {
		return slices.Equal(addrs(ask("web-acme.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1"})
	})
	m := ask("www.acme.test", dns.TypeA)
	if !m.Authoritative || len(m.Answer) != 2 || m.Answer[0].(*dns.CNAME).Target != "router-shard1.shard1.apps.test." {
		t.Fatalf("the user name: %v", m)
	}
	// a second gateway written to the store joins the answer
	if _, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: "Dataplane", Name: "gw-2"}, []byte(gatewayDP("gw-2", "10.1.0.2")), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second gateway in the answer", 10*time.Second, func() bool {
		return slices.Equal(addrs(ask("x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1", "10.1.0.2"})
	})
	// A gateway whose agent is connected is ready: only it is answered; its agent gone, no
	// replica is ready and all are answered again (fail static).
	gw := startAgent(t, e, r.Address, true, "--name", "gw-1")
	waitFor(t, "only the ready gateway answered", 10*time.Second, func() bool {
		return slices.Equal(addrs(ask("x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1"})
	})
	gw.Kill()
	took := waitFor(t, "the gone gateway's readiness dropped", 10*time.Second, func() bool {
		return slices.Equal(addrs(ask("x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1", "10.1.0.2"})
	})
	if took > 5*time.Second {
		t.Errorf("readiness left the answers after %v, want within 5s", took)
	}
	if m := ask("example.org", dns.TypeA); m.Rcode != dns.RcodeRefused {
		t.Fatalf("a name outside: %s", dns.RcodeToString[m.Rcode])
	}
	if m := ask("nope.acme.test", dns.TypeA); m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 {
		t.Fatalf("a name in a user zone with no route: %v", m)
	}
	// kuma-cp zones prints the same zones as master files, which BIND's checker accepts
	out := e.kumaCP("zones", "--etcd-endpoints", strings.Join(c.Endpoints(), ","), "--dns-user-zone", "acme.test")
	for _, want := range []string{"$ORIGIN shard1.apps.test.", "*.shard1.apps.test.\t30\tIN\tA\t10.1.0.2", "www.acme.test.\t30\tIN\tCNAME\trouter-shard1.shard1.apps.test."} {
		if !strings.Contains(out, want) {
			t.Fatalf("kuma-cp zones lacks %q:\n%s", want, out)
		}
	}
	if checker, err := exec.LookPath("named-checkzone"); err == nil {
		for _, zone := range strings.Split(out, "\n\n") {
			origin := strings.TrimSuffix(strings.Fields(strings.SplitN(zone, "\n", 2)[0])[1], ".")
			f := filepath.Join(t.TempDir(), origin)
			if err := writeFileAtomic(f, strings.TrimSuffix(zone, "\n")+"\n"); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(checker, origin, f).CombinedOutput(); err != nil {
				t.Errorf("named-checkzone %s: %v\n%s", origin, err, out)
			}
		}
	}
}

// clientDP is an ordinary dataplane of the mesh (not a gateway).
const clientDP = "type: Dataplane\nmesh: default\nname: client-1\nnetworking:\n  address: 10.9.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: client\n"

// An agent's resolver answers the shards' names and the users' CNAMEs as `dig @kuma-cp`
// does (the zones reach it over the link, readiness included), and follows a change.
func TestE2EAgentAnswersRouteNamesAsTheControlPlane(t *testing.T) {
	env := newShardEnv(t, 3)
	e := env.e
	st := env.st
	ctx := context.Background()
	put := func(typ, name, doc string) { t.Helper(); env.put(t, typ, name, doc) }
	put("Router", "shard1", shardRouter)
	put("Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	put("Dataplane", "gw-2", gatewayDP("gw-2", "10.1.0.2"))
	put("Dataplane", "client-1", clientDP)
	put("Route", "shop", userRoute)
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(t, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test")
	client := startAgent(t, e, r.Address, true, "--name", "client-1")
	ask := func(server, name string, qtype uint16) *dns.Msg {
		resp, err := query(server, name, qtype, true)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	queries := []struct {
		name  string
		qtype uint16
	}{
		{"web-acme.shard1.apps.test", dns.TypeA}, {"www.acme.test", dns.TypeA}, {"www.acme.test", dns.TypeAAAA},
		{"shard1.apps.test", dns.TypeSOA}, {"shard1.apps.test", dns.TypeA},
		{"router-shard1.shard1.apps.test", dns.TypeA},
	}
	same := func() bool {
		for _, q := range queries {
			cp, dp := ask(r.DNS, q.name, q.qtype), ask(client.dns, q.name, q.qtype)
			if !sameSections(cp, dp) {
				return false
			}
		}
		return true
	}
	addrsOf := answerAddrs
	// client-1's own agent is connected, but it is no gateway: no replica is ready, and both
	// are answered (fail static), by the control plane and the agent alike.
	waitFor(t, "the agent answering as the control plane", 10*time.Second, func() bool {
		return slices.Equal(addrsOf(ask(client.dns, "x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1", "10.1.0.2"}) && same()
	})
	for _, q := range queries {
		cp, dp := ask(r.DNS, q.name, q.qtype), ask(client.dns, q.name, q.qtype)
		if !sameSections(cp, dp) || !dp.Authoritative {
			t.Errorf("%s %s: the agent answers\n%v\nthe control plane\n%v", q.name, dns.TypeToString[q.qtype], dp, cp)
		}
	}
	if m := ask(client.dns, "www.acme.test", dns.TypeA); len(m.Answer) != 3 || m.Answer[0].(*dns.CNAME).Target != "router-shard1.shard1.apps.test." {
		t.Fatalf("the user name at the agent: %v", m)
	}
	// a name of the users' zone that is not this mesh's goes upstream (here an NXDOMAIN
	// upstream): the agent holds its own mesh's names of a users' zone only
	if m := ask(client.dns, "nope.acme.test", dns.TypeA); m.Authoritative || m.Rcode != dns.RcodeNameError {
		t.Errorf("a name of the users' zone no route of this mesh holds, at the agent: %v, want the upstream's answer", m)
	}
	// A gateway's agent connects: only it is ready, at the control plane and at the agent.
	gw := startAgent(t, e, r.Address, true, "--name", "gw-1")
	took := waitFor(t, "only the ready gateway answered by the agent", 10*time.Second, func() bool {
		return slices.Equal(addrsOf(ask(client.dns, "x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1"})
	})
	t.Logf("readiness reached the agent's answers in %v", took)
	waitFor(t, "the agent answering as the control plane again", 5*time.Second, same)
	// the gateway gone, both are answered again
	gw.Kill()
	waitFor(t, "the gone gateway's readiness dropped at the agent", 10*time.Second, func() bool {
		return slices.Equal(addrsOf(ask(client.dns, "x.shard1.apps.test", dns.TypeA)), []string{"10.1.0.1", "10.1.0.2"})
	})
	// a route removed from the store: its name leaves the agent's answers
	if err := st.Delete(ctx, cpstore.Key{Mesh: "default", Type: "Route", Name: "shop"}, cpstore.Any); err != nil {
		t.Fatal(err)
	}
	// (no route of this mesh holds it now: the agent asks upstream, here an NXDOMAIN one)
	waitFor(t, "the removed route's name gone at the agent", 10*time.Second, func() bool {
		m := ask(client.dns, "www.acme.test", dns.TypeA)
		return m.Rcode == dns.RcodeNameError && !m.Authoritative
	})
	queries = slices.DeleteFunc(queries, func(q struct {
		name  string
		qtype uint16
	}) bool {
		return strings.HasSuffix(q.name, ".acme.test")
	})
	waitFor(t, "the agent answering as the control plane after the change", 5*time.Second, same)
}

// sameSections compares two answers as a client sees them: rcode, AA, and each section as a
// set (the address sets rotate).
func sameSections(a, b *dns.Msg) bool {
	set := func(rrs []dns.RR) string {
		var s []string
		for _, rr := range rrs {
			if rr.Header().Rrtype != dns.TypeOPT {
				s = append(s, rr.String())
			}
		}
		slices.Sort(s)
		return strings.Join(s, "\n")
	}
	return a.Rcode == b.Rcode && a.Authoritative == b.Authoritative &&
		set(a.Answer) == set(b.Answer) && set(a.Ns) == set(b.Ns) && set(a.Extra) == set(b.Extra)
}

// shardBench is kuma-cp on etcd serving shard DNS, with an ordinary agent (client-1) whose
// resolver answers the route names too.
type shardBench struct {
	st           *cpstore.Etcd
	e            *cpEnv
	cpDNS, cpLnk string
	agentDNS     string
}

func startShardBench(b *testing.B) *shardBench {
	env := newShardEnv(b, 1)
	e := env.e
	sb := &shardBench{st: env.st, e: e}
	for _, d := range []struct{ typ, name, doc string }{
		{"Router", "shard1", shardRouter},
		{"Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1")},
		{"Dataplane", "gw-2", gatewayDP("gw-2", "10.1.0.2")},
		{"Dataplane", "client-1", clientDP},
	} {
		env.put(b, d.typ, d.name, d.doc)
	}
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(b, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test")
	sb.cpDNS, sb.cpLnk = r.DNS, r.Address
	sb.agentDNS = sb.agent(b, "client-1").dns
	return sb
}

// agent runs kuma-dp for dataplane name and waits until it is ready.
func (sb *shardBench) agent(b *testing.B, name string) *agent {
	_, dpBin := binaries(b)
	work := b.TempDir()
	a := &agent{ready: filepath.Join(work, "ready.json")}
	a.proc = startProc(b, "kuma-dp "+name, dpBin, "run", "--cp-address", "grpcs://"+sb.cpLnk, "--ca-cert-file", sb.e.path(certs.CACertFile),
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", testutil.NXDomainUpstream(b), "--envoy=false", "--work-dir", work, "--ready-file", a.ready,
		"--drain-time", "0s", "--cp-retry-backoff", "100ms", "--name", name)
	var rd struct{ DNSUDP []string }
	a.readyJSON(a.ready, &rd)
	a.dns = rd.DNSUDP[0]
	return a
}

// addrs asks server for name's A records, sorted (nil on no answer).
func benchAddrs(server, name string) []string {
	resp, err := query(server, name, dns.TypeA, false)
	if err != nil {
		return nil
	}
	return answerAddrs(resp)
}

// query asks server one question over UDP, with EDNS (1232 bytes) when edns is set.
func query(server, name string, qtype uint16, edns bool) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, server)
	return resp, err
}

// answerAddrs are the A addresses in m's answer, sorted.
func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// until polls cond every 2 ms and returns how long it took to hold (failing after 30 s).
func until(b *testing.B, what string, cond func() bool) time.Duration {
	start := time.Now()
	for !cond() {
		if time.Since(start) > 30*time.Second {
			b.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// BenchmarkShardDNSLatency: how long the shard DNS takes to follow a change, end to end with
// real processes (etcd, kuma-cp, kuma-dp agents).
//
//   - route-apply: a user route written to the store until its name resolves (the leader
//     schedules and admits it, the zones are rebuilt), at kuma-cp's DNS and at an agent's
//     resolver (the zone sent over the link).
//
//   - replica-not-ready: a gateway replica's agent killed until its address leaves the
//     shard's answers, at kuma-cp's DNS and at the agent's resolver.
//
//   - replica-frozen: a gateway replica's agent frozen (SIGSTOP) until its address leaves
//     kuma-cp's answers (gone), continued (SIGCONT) until it is back (back).
//
// Run it with:
//
//	go test -run '^$' -bench ShardDNSLatency -benchtime 20x ./cmd/kuma-cp
func BenchmarkShardDNSLatency(b *testing.B) {
	sb := startShardBench(b)
	ctx := context.Background()
	b.Run("route-apply", func(b *testing.B) {
		var cp, dp []time.Duration
		for i := range b.N {
			name := fmt.Sprintf("app-%d-%d.acme.test", b.N, i)
			doc := fmt.Sprintf("type: Route\nmesh: default\nname: r%d-%d\nnamespace: acme\nhost: %s\ndnsType: user\nto: {service: web, port: 8080}\n", b.N, i, name)
			start := time.Now()
			if _, err := sb.st.Put(ctx, cpstore.Key{Mesh: "default", Type: "Route", Name: fmt.Sprintf("r%d-%d.acme", b.N, i)}, []byte(doc), 0); err != nil {
				b.Fatal(err)
			}
			var cpDone, dpDone time.Duration
			until(b, "the route's name at kuma-cp and the agent", func() bool {
				if cpDone == 0 && len(benchAddrs(sb.cpDNS, name)) > 0 {
					cpDone = time.Since(start)
				}
				if dpDone == 0 && len(benchAddrs(sb.agentDNS, name)) > 0 {
					dpDone = time.Since(start)
				}
				return cpDone > 0 && dpDone > 0
			})
			cp, dp = append(cp, cpDone), append(dp, dpDone)
		}
		b.ReportMetric(quantile(cp, 0.50), "cp-p50-ms")
		b.ReportMetric(quantile(cp, 0.99), "cp-p99-ms")
		b.ReportMetric(quantile(dp, 0.50), "agent-p50-ms")
		b.ReportMetric(quantile(dp, 0.99), "agent-p99-ms")
	})
	b.Run("replica-not-ready", func(b *testing.B) {
		gw1 := sb.agent(b, "gw-1")
		defer gw1.Kill()
		both := []string{"10.1.0.1", "10.1.0.2"}
		var cp, dp []time.Duration
		for range b.N {
			gw2 := sb.agent(b, "gw-2")
			until(b, "both replicas ready", func() bool {
				return slices.Equal(benchAddrs(sb.cpDNS, "x.shard1.apps.test"), both) &&
					slices.Equal(benchAddrs(sb.agentDNS, "x.shard1.apps.test"), both)
			})
			start := time.Now()
			gw2.Kill()
			var cpDone, dpDone time.Duration
			until(b, "gw-2 gone from the answers", func() bool {
				if cpDone == 0 && slices.Equal(benchAddrs(sb.cpDNS, "x.shard1.apps.test"), []string{"10.1.0.1"}) {
					cpDone = time.Since(start)
				}
				if dpDone == 0 && slices.Equal(benchAddrs(sb.agentDNS, "x.shard1.apps.test"), []string{"10.1.0.1"}) {
					dpDone = time.Since(start)
				}
				return cpDone > 0 && dpDone > 0
			})
			cp, dp = append(cp, cpDone), append(dp, dpDone)
		}
		b.ReportMetric(quantile(cp, 0.50), "cp-p50-ms")
		b.ReportMetric(quantile(cp, 0.99), "cp-p99-ms")
		b.ReportMetric(quantile(dp, 0.50), "agent-p50-ms")
		b.ReportMetric(quantile(dp, 0.99), "agent-p99-ms")
	})
	// A frozen agent (SIGSTOP: its connection stays open) until its gateway leaves kuma-cp's
	// answers, and from SIGCONT until it is back (the control plane's keepalive, 2 s + 2 s,
	// is most of the first).
	b.Run("replica-frozen", func(b *testing.B) {
		gw1 := sb.agent(b, "gw-1")
		defer gw1.Kill()
		gw2 := sb.agent(b, "gw-2")
		defer gw2.Kill()
		both, one := []string{"10.1.0.1", "10.1.0.2"}, []string{"10.1.0.1"}
		var gone, back []time.Duration
		for range b.N {
			until(b, "both replicas ready", func() bool { return slices.Equal(benchAddrs(sb.cpDNS, "x.shard1.apps.test"), both) })
			start := time.Now()
			_ = gw2.Cmd.Process.Signal(syscall.SIGSTOP)
			until(b, "gw-2 gone", func() bool { return slices.Equal(benchAddrs(sb.cpDNS, "x.shard1.apps.test"), one) })
			gone = append(gone, time.Since(start))
			start = time.Now()
			_ = gw2.Cmd.Process.Signal(syscall.SIGCONT)
			until(b, "gw-2 back", func() bool { return slices.Equal(benchAddrs(sb.cpDNS, "x.shard1.apps.test"), both) })
			back = append(back, time.Since(start))
		}
		b.ReportMetric(quantile(gone, 0.50), "gone-p50-ms")
		b.ReportMetric(quantile(gone, 0.99), "gone-p99-ms")
		b.ReportMetric(quantile(back, 0.50), "back-p50-ms")
		b.ReportMetric(quantile(back, 0.99), "back-p99-ms")
	})
}

var (
	fakeEnvoyOnce sync.Once
	fakeEnvoyPath string
	fakeEnvoyErr  error
)

// fakeEnvoyBin builds kuma-dp's test Envoy (it reads the bootstrap, serves the admin API and
// consumes delta ADS for real; no Envoy binary exists on these machines).
func fakeEnvoyBin(t *testing.T) string {
	_, dpBin := binaries(t)
	fakeEnvoyOnce.Do(func() {
		fakeEnvoyPath = filepath.Join(filepath.Dir(dpBin), "envoy") // removed with the binaries in TestMain
		out, err := exec.Command("go", "build", "-o", fakeEnvoyPath, "../kuma-dp/testdata/fakeenvoy").CombinedOutput()
		if err != nil {
			fakeEnvoyErr = fmt.Errorf("go build fakeenvoy: %v\n%s", err, out)
		}
	})
	if fakeEnvoyErr != nil {
		t.Fatal(fakeEnvoyErr)
	}
	return fakeEnvoyPath
}

// routerRoutes reads a router listener's routes from the agent's /config_dump: "domain
// prefix>cluster" for each, and the listener names.
func routerRoutes(t *testing.T, admin string) (listeners, routes []string) {
	var dump struct {
		Envoy struct {
			Listeners []struct {
				Name         string `json:"name"`
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							RouteConfig struct {
								VirtualHosts []struct {
									Domains []string `json:"domains"`
									Routes  []struct {
										Match struct {
											Prefix string `json:"prefix"`
										} `json:"match"`
										Route struct {
											Cluster string `json:"cluster"`
										} `json:"route"`
									} `json:"routes"`
								} `json:"virtualHosts"`
							} `json:"routeConfig"`
						} `json:"typedConfig"`
					} `json:"filters"`
				} `json:"filterChains"`
			} `json:"listeners"`
		} `json:"envoy"`
	}
	if err := json.Unmarshal([]byte(httpGet(t, admin+"/config_dump")), &dump); err != nil {
		t.Fatal(err)
	}
	for _, l := range dump.Envoy.Listeners {
		listeners = append(listeners, l.Name)
		if !strings.HasPrefix(l.Name, "router:") {
			continue
		}
		for _, vh := range l.FilterChains[0].Filters[0].TypedConfig.RouteConfig.VirtualHosts {
			for _, r := range vh.Routes {
				routes = append(routes, vh.Domains[0]+" "+r.Match.Prefix+">"+r.Route.Cluster)
			}
		}
	}
	slices.Sort(routes)
	return listeners, routes
}

// The done-when test of the router replica: the route scheduler admits the older of two
// routes claiming www.acme.test and a system route; the gateway's agent gives its Envoy a
// router listener on its gateway port with exactly the admitted routes; a route deleted from
// the store leaves it.
func TestE2ERouterReplicaEnvoyConfig(t *testing.T) {
	env := newShardEnv(t, 1)
	e := env.e
	st := env.st
	ctx := context.Background()
	put := func(typ, name, doc string) { t.Helper(); env.put(t, typ, name, doc) }
	route := func(name, ns, host, dnsType, svc string) string {
		return fmt.Sprintf("type: Route\nmesh: default\nname: %s\nnamespace: %s\nhost: %s\ndnsType: %s\nto: {service: %s, port: 8080}\n", name, ns, host, dnsType, svc)
	}
	put("Router", "shard1", shardRouter)
	put("Dataplane", "gw-1", gatewayDP("gw-1", "127.0.0.1"))
	put("Dataplane", "web-1", "type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.2.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web\n")
	put("Route", "shop.acme", route("shop", "acme", "www.acme.test", "user", "web"))
	put("Route", "www.acme", route("www", "acme", "www", "system", "web"))
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(t, "--dns-user-zone", "acme.test")
	// the newer claim on www.acme.test, from another namespace, to another service:
	// HostAlreadyClaimed (were it admitted, it would take the name: it sorts first)
	time.Sleep(50 * time.Millisecond)
	put("Dataplane", "api-1", "type: Dataplane\nmesh: default\nname: api-1\nnetworking:\n  address: 10.3.0.1\n  inbound:\n  - port: 9090\n    tags:\n      kuma.io/service: api\n")
	put("Route", "copycat.other", route("copycat", "other", "www.acme.test", "user", "api"))
	gw := startAgent(t, e, r.Address, true, "--name", "gw-1", "--envoy=true", "--binary-path", fakeEnvoyBin(t))
	admin := gw.admin()
	want := []string{"acme-www.shard1.apps.test />web", "www.acme.test />web"}
	var listeners, routes []string
	waitFor(t, "the admitted routes in the router listener", 15*time.Second, func() bool {
		listeners, routes = routerRoutes(t, admin)
		return slices.Equal(routes, want)
	})
	waitFor(t, "the copycat route refused (HostAlreadyClaimed)", 10*time.Second, func() bool {
		it, err := st.Get(ctx, cpstore.Key{Mesh: "default", Type: "Route", Name: "copycat.other"})
		return err == nil && strings.Contains(string(it.Doc), "HostAlreadyClaimed")
	})
	if _, routes = routerRoutes(t, admin); !slices.Equal(routes, want) {
		t.Fatalf("router routes %v, want %v", routes, want)
	}
	if !slices.Contains(listeners, "router:127.0.0.1:8080") || slices.Contains(listeners, "inbound:127.0.0.1:8080") {
		t.Fatalf("listeners %v: the gateway port must carry the router listener", listeners)
	}
	// the system route deleted: it leaves the config
	if err := st.Delete(ctx, cpstore.Key{Mesh: "default", Type: "Route", Name: "www.acme"}, cpstore.Any); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted route gone from the router listener", 10*time.Second, func() bool {
		_, routes = routerRoutes(t, admin)
		return slices.Equal(routes, []string{"www.acme.test />web"})
	})
}

// startNSDSecondary runs nsd as a secondary of kuma-cp's DNS (a hidden primary at primary)
// for zone, on port; it returns nsd's address, or "" (logged) without nsd or root.
func startNSDSecondary(t *testing.T, port int, primary, zone string) string {
	nsd, err := exec.LookPath("nsd")
	if err != nil {
		t.Log("nsd not installed (Debian package nsd; make test installs it as root): the secondary is not checked")
		return ""
	}
	if os.Geteuid() != 0 {
		t.Log("nsd needs root here (it opens its files as the user it runs as): the secondary is not checked")
		return ""
	}
	_, pport, _ := net.SplitHostPort(primary)
	dir := t.TempDir()
	conf := fmt.Sprintf("server:\n  ip-address: 127.0.0.1@%d\n  port: %d\n  username: \"\"\n  chroot: \"\"\n  zonesdir: %q\n  database: \"\"\n"+
		"  zonelistfile: %q\n  xfrdfile: %q\n  xfrdir: %q\n  pidfile: %q\n  logfile: %q\n  verbosity: 1\n  server-count: 1\n"+
		"remote-control:\n  control-enable: no\nzone:\n  name: %q\n  allow-notify: 127.0.0.1 NOKEY\n  request-xfr: AXFR 127.0.0.1@%s NOKEY\n",
		port, port, dir, filepath.Join(dir, "zone.list"), filepath.Join(dir, "xfrd.state"), dir, filepath.Join(dir, "nsd.pid"),
		filepath.Join(dir, "nsd.log"), zone, pport)
	confPath := filepath.Join(dir, "nsd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startProc(t, "nsd", nsd, "-d", "-c", confPath)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// The router shards, done: 2 routers x 2 replicas on etcd, a system and a user route
// scheduled by the leader. `dig @kuma-cp` gives each shard's set in rotating order, the user
// CNAME chased to its shard, NODATA and NXDOMAIN with the SOA; a router replica's Envoy lists
// exactly its router's admitted routes; a replica stopped leaves the set, and nsd, a
// secondary of kuma-cp, answers the same set with the same serial after the change.
func TestE2ERouterShardsDone(t *testing.T) {
	env := newShardEnv(t, 1)
	e := env.e
	put := func(typ, name, doc string) { t.Helper(); env.put(t, typ, name, doc) }
	gw := func(name, ip, svc string) string {
		return "type: Dataplane\nmesh: default\nname: " + name + "\nnetworking:\n  address: " + ip + "\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: " + svc + "\n"
	}
	for _, s := range []string{"1", "2"} {
		put("Router", "shard"+s, "type: Router\nmesh: default\nname: shard"+s+"\ndns: shard"+s+".apps.test\nrouteSelector: {shard: \""+s+"\"}\ndataplanes: {kuma.io/service: gateway-"+s+"}\n")
		put("Dataplane", "gw-"+s+"a", gw("gw-"+s+"a", "10."+s+".0.1", "gateway-"+s))
		put("Dataplane", "gw-"+s+"b", gw("gw-"+s+"b", "10."+s+".0.2", "gateway-"+s))
	}
	put("Dataplane", "web-1", gw("web-1", "10.9.0.1", "web"))
	put("Route", "www.acme", "type: Route\nmesh: default\nname: www\nnamespace: acme\nhost: www\nlabels: {shard: \"1\"}\nto: {service: web, port: 8080}\n")
	put("Route", "shop.acme", "type: Route\nmesh: default\nname: shop\nnamespace: acme\nhost: shop.acme.test\ndnsType: user\nlabels: {shard: \"2\"}\nto: {service: web, port: 8080}\n")
	nsdPort := testutil.FreeDNSPort(t)
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(t, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test", "--dns-transfer-from", "127.0.0.1/32", "--dns-secondary", fmt.Sprintf("127.0.0.1:%d", nsdPort))
	agents := map[string]*agent{}
	for _, n := range []string{"gw-1b", "gw-2a", "gw-2b"} {
		agents[n] = startAgent(t, e, r.Address, true, "--name", n)
	}
	agents["gw-1a"] = startAgent(t, e, r.Address, true, "--name", "gw-1a", "--envoy=true", "--binary-path", fakeEnvoyBin(t))

	ask := func(server, name string, qtype uint16) *dns.Msg {
		resp, err := query(server, name, qtype, false)
		if err != nil {
			return new(dns.Msg)
		}
		return resp
	}
	shard1, shard2 := []string{"10.1.0.1", "10.1.0.2"}, []string{"10.2.0.1", "10.2.0.2"}
	waitFor(t, "both routes scheduled and served", 15*time.Second, func() bool {
		return slices.Equal(benchAddrs(r.DNS, "acme-www.shard1.apps.test"), shard1) && slices.Equal(benchAddrs(r.DNS, "shop.acme.test"), shard2)
	})
	// rotation: both addresses come first over a few answers, the set always whole
	firsts := map[string]bool{}
	for range 10 {
		m := ask(r.DNS, "acme-www.shard1.apps.test", dns.TypeA)
		if len(m.Answer) != 2 {
			t.Fatalf("an incomplete set: %v", m)
		}
		firsts[m.Answer[0].(*dns.A).A.String()] = true
	}
	if len(firsts) != 2 {
		t.Errorf("first addresses over 10 answers: %v, want both", firsts)
	}
	if m := ask(r.DNS, "shop.acme.test", dns.TypeA); !m.Authoritative || len(m.Answer) != 3 ||
		m.Answer[0].(*dns.CNAME).Target != "router-shard2.shard2.apps.test." {
		t.Fatalf("the user name: %v", m)
	}
	if m := ask(r.DNS, "acme-www.shard1.apps.test", dns.TypeAAAA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 ||
		len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("NODATA: %v", m)
	}
	if m := ask(r.DNS, "nope.acme.test", dns.TypeA); m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("NXDOMAIN: %v", m)
	}
	// the router replica's Envoy: exactly shard1's admitted route
	admin := agents["gw-1a"].admin()
	waitFor(t, "shard1's route in gw-1a's Envoy", 10*time.Second, func() bool {
		_, routes := routerRoutes(t, admin)
		return slices.Equal(routes, []string{"acme-www.shard1.apps.test />web"})
	})
	// nsd, a secondary, answers as kuma-cp
	nsd := startNSDSecondary(t, nsdPort, r.DNS, "shard1.apps.test.")
	serialOf := func(server string) uint32 {
		if m := ask(server, "shard1.apps.test", dns.TypeSOA); len(m.Answer) == 1 {
			return m.Answer[0].(*dns.SOA).Serial
		}
		return 0
	}
	if nsd != "" {
		waitFor(t, "nsd serving the shard's zone", 20*time.Second, func() bool {
			return slices.Equal(benchAddrs(nsd, "acme-www.shard1.apps.test"), shard1)
		})
	}
	// a replica stopped: it leaves the set, at kuma-cp and then at nsd (NOTIFY, transfer)
	before := serialOf(r.DNS)
	agents["gw-1b"].Kill()
	took := waitFor(t, "the stopped replica gone", 5*time.Second, func() bool {
		return slices.Equal(benchAddrs(r.DNS, "acme-www.shard1.apps.test"), []string{"10.1.0.1"})
	})
	t.Logf("the stopped replica left kuma-cp's answers in %v", took)
	after := serialOf(r.DNS)
	if after == before || int32(after-before) < 0 {
		t.Fatalf("serial %d after the change, %d before: it must move forward", after, before)
	}
	if nsd != "" {
		waitFor(t, "nsd answering the change with kuma-cp's serial", 20*time.Second, func() bool {
			return serialOf(nsd) == after && slices.Equal(benchAddrs(nsd, "acme-www.shard1.apps.test"), []string{"10.1.0.1"})
		})
	}
}

// shardEnv is a real etcd for the router shard tests and the kuma-cp serving it.
type shardEnv struct {
	c  *etcdtest.Cluster
	e  *cpEnv
	st *cpstore.Etcd
}

func newShardEnv(tb testing.TB, members int) *shardEnv {
	c := etcdtest.Start(tb, members)
	return &shardEnv{c: c, e: newCPEnv(tb), st: cpstore.NewEtcd(c.Client(), "/kuma")}
}

// put stores doc as the resource typ/name of mesh default.
func (s *shardEnv) put(tb testing.TB, typ, name, doc string) {
	tb.Helper()
	if _, err := s.st.Put(context.Background(), cpstore.Key{Mesh: "default", Type: typ, Name: name}, []byte(doc), 0); err != nil {
		tb.Fatal(err)
	}
}

// startCP starts kuma-cp on the store (TLS, an admin token, every listener on a free port)
// with extra flags, and returns what its ready file reports: its DNS address (with
// --dns-address among the flags) and its agents' link address.
func (s *shardEnv) startCP(tb testing.TB, extra ...string) (dnsAddr, linkAddr string) {
	tb.Helper()
	_, dnsAddr, linkAddr = s.startCPProc(tb, extra...)
	return dnsAddr, linkAddr
}

// startCPProc is startCP, returning the process too (to stop it).
func (s *shardEnv) startCPProc(tb testing.TB, extra ...string) (p *proc, dnsAddr, linkAddr string) {
	tb.Helper()
	tok := s.e.path("admin.token")
	if err := writeFileAtomic(tok, "admin-secret\n"); err != nil {
		tb.Fatal(err)
	}
	cpBin, _ := binaries(tb)
	ready := filepath.Join(tb.TempDir(), "ready.json")
	args := append([]string{"serve", "--store", "etcd", "--etcd-endpoints", strings.Join(s.c.Endpoints(), ","),
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--admin-token-file", tok,
		"--tls-cert-file", s.e.path(certs.TLSCertFile), "--tls-key-file", s.e.path(certs.TLSKeyFile), "--ready-file", ready}, extra...)
	p = startProc(tb, "kuma-cp", cpBin, args...)
	var r struct{ DNS, Address string }
	p.readyJSON(ready, &r)
	return p, r.DNS, r.Address
}
