package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// Issue 27 item 3, end to end: a 3-member etcd, kuma-cp with --dns-user-zone acme.test, and
// real agents of two meshes asked with dig. Mesh other's routes on public names
// (api.github.com, a wildcard over com, in-addr.arpa) are refused; its route in the users'
// zone is answered by its own agents only; mesh default's agents answer default's names and
// send everything else upstream, as before. Mesh default's agents used to answer
// api.github.com and anything.com with a CNAME to mesh other's router, and -x 8.8.8.8 with an
// authoritative NXDOMAIN.
func TestE2EAgentsAnswerTheirOwnMeshsRouteNames(t *testing.T) {
	digBin, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed (Debian package dnsutils; make test installs it): skipping")
	}
	env := newShardEnv(t, 3)
	ctx := context.Background()
	put := func(m, typ, name, doc string) {
		t.Helper()
		if _, err := env.st.Put(ctx, cpstore.Key{Mesh: m, Type: typ, Name: name}, []byte(doc), 0); err != nil {
			t.Fatal(err)
		}
	}
	route := func(m, ns, name, host, extra string) string {
		return "type: Route\nmesh: " + m + "\nname: " + name + "\nnamespace: " + ns + "\nhost: " + host + "\ndnsType: user\n" + extra + "to: {service: web, port: 8080}\n"
	}
	put("default", "Router", "shard1", shardRouter)
	put("default", "Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	put("default", "Dataplane", "client-1", clientDP)
	put("default", "Route", "shop.acme", route("default", "acme", "shop", "www.acme.test", ""))
	put("other", "Router", "evil", "type: Router\nmesh: other\nname: evil\ndns: evil.apps.test\ndataplanes: {kuma.io/service: egw}\nrouteAdmission: {wildcardPolicy: WildcardsAllowed}\n")
	put("other", "Dataplane", "egw-1", "type: Dataplane\nmesh: other\nname: egw-1\nnetworking:\n  address: 10.6.6.6\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: egw\n")
	put("other", "Dataplane", "oclient-1", strings.ReplaceAll(strings.ReplaceAll(clientDP, "mesh: default", "mesh: other"), "client-1", "oclient-1"))
	put("other", "Route", "github.attacker", route("other", "attacker", "github", "api.github.com", ""))
	put("other", "Route", "com.attacker", route("other", "attacker", "com", "www.com", "wildcardPolicy: Subdomain\n"))
	put("other", "Route", "arpa.attacker", route("other", "attacker", "arpa", "in-addr.arpa", ""))
	put("other", "Route", "api.attacker", route("other", "attacker", "api", "api.acme.test", ""))
	var r struct{ DNS, Address string }
	r.DNS, r.Address = env.startCP(t, "--dns-address", "127.0.0.1:0", "--dns-user-zone", "acme.test")
	def := startAgent(t, env.e, r.Address, true, "--name", "client-1")
	oth := startAgent(t, env.e, r.Address, true, "--mesh", "other", "--name", "oclient-1")

	dig := func(a *agent, args ...string) string {
		t.Helper()
		host, port, _ := net.SplitHostPort(a.dns)
		args = append([]string{"@" + host, "-p", port, "+tries=1", "+time=3"}, args...)
		out, err := exec.Command(digBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ") // tabs align dig's columns: compare words
	}
	// Both meshes' user names are admitted and served by the control plane's DNS.
	waitFor(t, "both meshes' names at kuma-cp", 20*time.Second, func() bool {
		www, err1 := query(r.DNS, "www.acme.test", dns.TypeCNAME, false)
		api, err2 := query(r.DNS, "api.acme.test", dns.TypeCNAME, false)
		return err1 == nil && err2 == nil && len(www.Answer) == 1 && len(api.Answer) == 1 &&
			www.Answer[0].(*dns.CNAME).Target == "router-shard1.shard1.apps.test." && api.Answer[0].(*dns.CNAME).Target == "router-evil.evil.apps.test."
	})
	waitFor(t, "each agent answering its own mesh's name", 20*time.Second, func() bool {
		return strings.Contains(dig(def, "www.acme.test", "A"), "router-shard1.shard1.apps.test. 30 IN A 10.1.0.1") &&
			strings.Contains(dig(oth, "api.acme.test", "A"), "router-evil.evil.apps.test. 30 IN A 10.6.6.6")
	})
	for _, name := range []string{"github", "com", "arpa"} {
		it, err := env.st.Get(ctx, cpstore.Key{Mesh: "other", Type: "Route", Name: name + ".attacker"})
		if err != nil || !strings.Contains(string(it.Doc), "RouteNotAdmitted") || strings.Contains(string(it.Doc), "scheduled") {
			t.Errorf("mesh other's route %s: %s %v, want RouteNotAdmitted and not scheduled", name, it.Doc, err)
		}
	}
	// Mesh default's agent: its own name answered here (aa); another mesh's, public names
	// and reverse lookups go upstream (here an upstream answering NXDOMAIN, not aa).
	for _, c := range []struct {
		a    *agent
		args []string
		want []string
		not  []string
	}{
		{def, []string{"www.acme.test", "A"}, []string{"flags: qr aa", "www.acme.test. 30 IN CNAME router-shard1.shard1.apps.test."}, nil},
		{def, []string{"api.acme.test", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "evil"}},
		{def, []string{"x.evil.apps.test", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "10.6.6.6"}},
		{def, []string{"api.github.com", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "CNAME"}},
		{def, []string{"anything.com", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "CNAME"}},
		{def, []string{"-x", "8.8.8.8"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa"}},
		{oth, []string{"api.acme.test", "A"}, []string{"flags: qr aa", "api.acme.test. 30 IN CNAME router-evil.evil.apps.test."}, nil},
		{oth, []string{"www.acme.test", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "shard1"}},
		{oth, []string{"api.github.com", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "CNAME"}},
		{oth, []string{"web-acme.shard1.apps.test", "A"}, []string{"status: NXDOMAIN"}, []string{"flags: qr aa", "10.1.0.1"}},
	} {
		out := dig(c.a, c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("dig %v at mesh %s's agent: no %q in\n%s", c.args, meshOf(c.a, def), w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("dig %v at mesh %s's agent: %q in\n%s", c.args, meshOf(c.a, def), n, out)
			}
		}
	}
}

func meshOf(a, def *agent) string {
	if a == def {
		return "default"
	}
	return "other"
}
