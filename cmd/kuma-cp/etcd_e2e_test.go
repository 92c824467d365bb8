package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// startReplica runs `kuma-cp serve --store etcd` on the cluster; it returns the process and
// its agent and API addresses.
func (e *cpEnv) startReplica(c *etcdtest.Cluster, id string) (p *proc, addr, apiAddr string) {
	e.t.Helper()
	return e.startReplicaOn(c.Endpoints(), id)
}

// startReplicaOn is startReplica on the etcd endpoints given (relays in front of members).
func (e *cpEnv) startReplicaOn(endpoints []string, id string) (p *proc, addr, apiAddr string) {
	e.t.Helper()
	cpBin, _ := binaries(e.t)
	ready := filepath.Join(e.t.TempDir(), "ready.json")
	p = startProc(e.t, "kuma-cp "+id, cpBin, "serve", "--store", "etcd", "--etcd-endpoints", strings.Join(endpoints, ","),
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
		"--admin-token-file", e.path("admin.token"), "--replica-id", id, "--leader-lease-ttl", "2s",
		"--tls-cert-file", e.path(certs.TLSCertFile), "--tls-key-file", e.path(certs.TLSKeyFile), "--token-key-file", e.path(certs.TokenKeyFile),
		"--ready-file", ready, "--log-level", "debug")
	var r struct{ Address, API, Metrics string }
	p.readyJSON(ready, &r)
	p.metrics = r.Metrics
	return p, r.Address, r.API
}

func (e *cpEnv) kumaCP(args ...string) string {
	e.t.Helper()
	var out, errb strings.Builder
	if rc := dispatch(args, &out, &errb); rc != exitOK {
		e.t.Fatalf("kuma-cp %v: exit %d\n%s", args, rc, errb.String())
	}
	return out.String()
}

// The done-when test of the etcd control plane: a 3-member etcd, 2 replicas, 2 agents each
// pointing at both. `kuma-cp apply` of a VirtualOutbound change reaches both agents' DNS;
// the replica serving them is killed (SIGKILL): they fail over and a second change still
// reaches them.
func TestE2EReplicasOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, 3)
	e := newCPEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r1, addr1, api1 := e.startReplica(c, "replica-1")
	r2, addr2, api2 := e.startReplica(c, "replica-2")
	tok := e.path("admin.token")
	write := testutil.TempFiles(t)
	inventory := write("inventory.yaml", dpWeb+"---\n"+dpHTTPBin)
	out := e.kumaCP("apply", "-f", inventory, "-f", write("vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh")),
		"--api-url", "http://"+api1, "--admin-token-file", tok)
	if !strings.Contains(out, "dataplanes default/web-1 created") || !strings.Contains(out, "virtualoutbounds default/by-version created") {
		t.Fatalf("apply: %s", out)
	}
	// Both agents prefer replica-1 (listed first), replica-2 next.
	both := addr1 + ",grpcs://" + addr2
	var agents []*agent
	for _, name := range []string{"web-1", "httpbin-1"} {
		agents = append(agents, startAgent(t, e, both, true, "--name", name, "--dataplane-token-file", e.token(name, "default")))
	}
	for _, a := range agents {
		if !a.answers("v1.httpbin.mesh") {
			t.Fatal("the applied VirtualOutbound's name does not resolve")
		}
	}
	// A change applied through the other replica's API reaches both agents.
	e.kumaCP("apply", "-f", write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.first.mesh")),
		"--api-url", "http://"+api2, "--admin-token-file", tok)
	for _, a := range agents {
		waitFor(t, "the first change", 10*time.Second, func() bool { return a.answers("httpbin.v1.first.mesh") })
	}
	// storeRevision in `get status` is a property of what is served: a replica started after
	// a delete (it reads the store; the others followed the delete) reports the same.
	e.kumaCP("apply", "-f", write("web-9.yaml", strings.Replace(dpWeb, "web-1", "web-9", 1)), "--api-url", "http://"+api1, "--admin-token-file", tok)
	e.kumaCP("delete", "dataplanes", "web-9", "--api-url", "http://"+api1, "--admin-token-file", tok)
	r3, _, api3 := e.startReplica(c, "replica-3")
	storeRevision := func(api string) string {
		var st struct{ StoreRevision int64 }
		if err := json.Unmarshal([]byte(e.kumaCP("get", "status", "-o", "json", "--api-url", "http://"+api)), &st); err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(st.StoreRevision, 10)
	}
	var revs string
	waitFor(t, "one storeRevision on the three replicas", 10*time.Second, func() bool {
		revs = storeRevision(api1) + " " + storeRevision(api2) + " " + storeRevision(api3)
		f := strings.Fields(revs)
		return f[0] == f[1] && f[1] == f[2]
	})
	t.Logf("storeRevision on replica-1, -2, -3: %s", revs)
	r3.Kill()
	r1.Kill()
	for _, a := range agents {
		waitFor(t, "the agent on replica-2", 10*time.Second, func() bool { return a.Count("trying the next replica") > 0 })
		if !a.answers("httpbin.v1.first.mesh") {
			t.Fatal("DNS stopped answering during the failover")
		}
	}
	e.kumaCP("apply", "-f", write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.second.mesh")),
		"--api-url", "http://"+api2, "--admin-token-file", tok)
	for _, a := range agents {
		took := waitFor(t, "the second change after the failover", 10*time.Second, func() bool { return a.answers("httpbin.v1.second.mesh") })
		t.Logf("second change reached the agent in %v", took)
	}
	// The watch lag: every revision seen is served, and the metrics say so.
	waitFor(t, "replica-2's watch caught up", 5*time.Second, func() bool {
		m := httpGet(t, "http://"+r2.metrics+"/metrics")
		seen, served := metricValue(m, "kuma_cp_store_revision_seen"), metricValue(m, "kuma_cp_store_revision")
		return seen > 0 && seen == served && metricValue(m, "kuma_cp_watch_lag_revisions") == 0 &&
			strings.Contains(m, "kuma_cp_watch_lag_seconds 0\n")
	})
	// kuma-cp get shows the resources and the status names a leader.
	if out := e.kumaCP("get", "virtualoutbounds", "--api-url", "http://"+api2); !strings.Contains(out, "by-version") {
		t.Fatalf("get: %s", out)
	}
	waitFor(t, "replica-2 leads", 10*time.Second, func() bool {
		return strings.Contains(e.kumaCP("get", "status", "--api-url", "http://"+api2), "leader:        replica-2")
	})
}

// metricValue is the value of an unlabelled metric in a /metrics page (-1 when absent).
func metricValue(page, name string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// A replica that reaches no quorum of etcd - every member killed, or cut off by relays that
// stop forwarding without closing a connection - says so within the lease TTL (2 s here):
// /ready 503 with the reason, kuma_cp_store_synced 0, one log line; it no longer calls
// itself the leader and get status names no stale leader; a write is refused within 1 s;
// its agent is still served the last resources read. Healed: one line, ready again, and a
// change applied through another replica during the partition reaches the agent. (It used
// to stay ready, synced and leader for 30 s and more, writes failing after 5 s.)
func TestE2EStoreOutage(t *testing.T) {
	for _, fault := range []string{"every member killed", "partition"} {
		t.Run(strings.ReplaceAll(fault, " ", "-"), func(t *testing.T) {
			c := etcdtest.Start(t, 3)
			e := newCPEnv(t)
			if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			endpoints, cut, heal := c.Endpoints(), func() {
				for i := range c.Members {
					c.Kill(i)
				}
			}, func() { c.Restart(0, 1, 2) }
			if fault == "partition" {
				relays := c.Relays()
				endpoints, cut, heal = etcdtest.URLs(relays), func() {
					for _, r := range relays {
						r.Pause()
					}
				}, func() {
					for _, r := range relays {
						r.Resume()
					}
				}
			}
			r1, addr, api := e.startReplicaOn(endpoints, "replica-1")
			tok := e.path("admin.token")
			file := func(name, body string) string {
				p := filepath.Join(t.TempDir(), name)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			}
			e.kumaCP("apply", "-f", file("inventory.yaml", dpWeb+"---\n"+dpHTTPBin),
				"-f", file("vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh")), "--api-url", "http://"+api, "--admin-token-file", tok)
			ag := startAgent(t, e, addr, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
			waitFor(t, "the agent answers the applied name", 10*time.Second, func() bool { return ag.answers("v1.httpbin.mesh") })
			ready := func() (int, string) {
				resp, err := http.Get("http://" + r1.metrics + "/ready")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			status := func() string { return e.kumaCP("get", "status", "--api-url", "http://"+api) }
			waitFor(t, "replica-1 leads and is ready", 10*time.Second, func() bool {
				code, _ := ready()
				return code == 200 && strings.Contains(status(), "leader:        replica-1")
			})

			cut()
			took := waitFor(t, "/ready 503 naming the outage", 2*time.Second+3*time.Second, func() bool {
				code, body := ready()
				return code == 503 && strings.Contains(body, "no quorum of etcd reached since")
			})
			_, body := ready()
			t.Logf("/ready after %v: %s", took, strings.TrimSpace(body))
			m := httpGet(t, "http://"+r1.metrics+"/metrics")
			if metricValue(m, "kuma_cp_store_synced") != 0 {
				t.Fatalf("kuma_cp_store_synced %v during the outage", metricValue(m, "kuma_cp_store_synced"))
			}
			waitFor(t, "leadership given up", 5*time.Second, func() bool {
				return metricValue(httpGet(t, "http://"+r1.metrics+"/metrics"), "kuma_cp_leader") == 0
			})
			st := status()
			if !strings.Contains(st, "synced:        false") || strings.Contains(st, "leader:        replica-1") ||
				!strings.Contains(st, "storeError:") {
				t.Fatalf("get status during the outage:\n%s", st)
			}
			var out, errb strings.Builder
			start := time.Now()
			rc := dispatch([]string{"apply", "-f", file("vo2.yaml", virtualOutbound("default", "{{service}}.{{version}}.during.mesh")),
				"--api-url", "http://" + api, "--admin-token-file", tok}, &out, &errb)
			if refused := time.Since(start); rc == exitOK || refused > time.Second || !strings.Contains(errb.String(), "503") {
				t.Fatalf("a write during the outage: exit %d after %v: %s%s", rc, refused, out.String(), errb.String())
			}
			if !ag.answers("v1.httpbin.mesh") {
				t.Fatal("the agent no longer answers the last good name during the outage")
			}
			waitFor(t, "the outage logged", 5*time.Second, func() bool { return r1.Count("etcd quorum lost") > 0 })
			time.Sleep(2 * time.Second) // more probes fail: still one line
			if n := r1.Count("etcd quorum lost"); n != 1 {
				t.Fatalf("%d lines for one outage, want 1", n)
			}

			if fault == "partition" { // applied elsewhere meanwhile: reaches the agent once healed
				_, _, api2 := e.startReplicaOn(c.Endpoints(), "replica-2")
				e.kumaCP("apply", "-f", file("vo3.yaml", virtualOutbound("default", "{{service}}.{{version}}.elsewhere.mesh")),
					"--api-url", "http://"+api2, "--admin-token-file", tok)
			}
			heal()
			waitFor(t, "/ready 200 after the outage", 15*time.Second, func() bool { code, _ := ready(); return code == 200 })
			if fault == "partition" {
				waitFor(t, "the change applied elsewhere reaches the agent", 10*time.Second, func() bool { return ag.answers("httpbin.v1.elsewhere.mesh") })
			}
			waitFor(t, "the outage's end logged", 5*time.Second, func() bool { return r1.Count("etcd quorum reached again") > 0 })
			time.Sleep(time.Second)
			if n := r1.Count("etcd quorum reached again"); n != 1 {
				t.Fatalf("%d lines for the end of one outage, want 1", n)
			}
			if metricValue(httpGet(t, "http://"+r1.metrics+"/metrics"), "kuma_cp_store_synced") != 1 {
				t.Fatal("kuma_cp_store_synced not 1 after the outage")
			}
			if n := r1.Count(`"caller":"v3@`); n != 0 {
				t.Fatalf("%d lines in the etcd client's own format", n)
			}
		})
	}
}

// One etcd member frozen (SIGSTOP) while two hold the quorum: 12 applies and 12 gets through
// a replica's API, none fails (6 of 12 writes got 503 and one 500, 4 of 12 reads 503, each
// after 5 s: requests went round robin to the frozen member and waited there).
func TestE2EFrozenEtcdMemberFailsNoAPICall(t *testing.T) {
	c := etcdtest.Start(t, 3)
	e := newCPEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, api := e.startReplica(c, "replica-1")
	tok := e.path("admin.token")
	dir := t.TempDir()
	c.Freeze(c.Follower()) // the leader frozen is an election first, no quorum meanwhile
	var failed []string
	for i := range 12 {
		p := filepath.Join(dir, fmt.Sprint("vo-", i, ".yaml"))
		body := strings.Replace(virtualOutbound("default", fmt.Sprintf("{{service}}.v%d.mesh", i)), "name: by-version", fmt.Sprint("name: vo-", i), 1)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"apply", "-f", p, "--admin-token-file", tok}, {"get", "virtualoutbounds"}} {
			var out, errb strings.Builder
			start := time.Now()
			if rc := dispatch(append(args, "--api-url", "http://"+api), &out, &errb); rc != exitOK {
				failed = append(failed, fmt.Sprintf("kuma-cp %s: exit %d after %v: %s", args[0], rc, time.Since(start).Round(time.Millisecond), errb.String()))
			}
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of 24 calls failed with a member frozen:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if out := e.kumaCP("get", "virtualoutbounds", "--api-url", "http://"+api); strings.Count(out, "vo-") != 12 {
		t.Fatalf("get after the applies:\n%s", out)
	}
}
