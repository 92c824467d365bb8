package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The e2e tests' mesh: the shared fixtures (internal/testutil).
const (
	dpWeb     = testutil.DataplaneWeb
	dpHTTPBin = testutil.DataplaneHTTPBin
	dpOther   = testutil.DataplaneOther // another mesh: no agent of mesh default may learn of it
)

func virtualOutbound(meshName, host string) string { return testutil.VirtualOutbound(meshName, host) }

// meshEnv is a control plane whose directory holds web-1 and httpbin-1 in mesh default (and
// secret-1 in mesh other), with the VirtualOutbound naming <version>.<service>.mesh.
func meshEnv(t *testing.T) *cpEnv {
	e := newCPEnv(t)
	e.write("web.yaml", dpWeb)
	e.write("httpbin.yaml", dpHTTPBin)
	e.write("other.yaml", dpOther+"---\n"+virtualOutbound("other", "{{version}}.{{service}}.mesh"))
	e.write("vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh"))
	return e
}

// The done-when test: kuma-cp and two kuma-dp agents (one identified by its dataplane file
// kept by the agent, one by --name/--mesh alone); a policy changed in the control plane's
// directory changes both agents' DNS answers.
func TestE2EPolicyChangeReachesBothAgents(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	webFile := e.path("web.yaml")
	if err := writeFileAtomic(webFile, dpWeb); err != nil {
		t.Fatal(err)
	}
	web := startAgent(t, e, e.address, true, "--dataplane-file", webFile, "--dataplane-token-file", e.token("web-1", "default"))
	httpbin := startAgent(t, e, e.address, true, "--name", "httpbin-1", "--mesh", "default",
		"--dataplane-token-file", e.token("httpbin-1", "default"))
	for _, a := range []*agent{web, httpbin} {
		if !a.answers("v1.httpbin.mesh") {
			t.Fatalf("v1.httpbin.mesh not answered before the change:\n%s", a.Logs)
		}
		if a.answers("v1.secret.mesh") {
			t.Fatal("an agent of mesh default answers a name of mesh other")
		}
	}
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.changed.mesh"))
	for _, a := range []*agent{web, httpbin} {
		waitFor(t, "the new name answered", 5*time.Second, func() bool { return a.answers("httpbin.v1.changed.mesh") })
		if a.answers("v1.httpbin.mesh") {
			t.Error("the old name still answers after the change")
		}
	}
	if n := cp.Count(`msg="dataplane connected"`); n != 2 {
		t.Errorf("control plane saw %d connections, want 2", n)
	}
}

// Control plane killed: DNS keeps answering from the last good model; a change made while
// it is down arrives once it is back (same address), without restarting the agent.
func TestE2EControlPlaneKilledAndRestarted(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	cp.Kill()
	waitFor(t, "the agent sees the control plane gone", 5*time.Second, func() bool {
		return a.Count(`control plane link down; reconnecting`) > 0
	})
	for i := 0; i < 5; i++ { // answering meanwhile, from the last good model
		if !a.answers("v1.httpbin.mesh") {
			t.Fatal("DNS stopped answering while the control plane is down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.back.mesh"))
	e.start()
	took := waitFor(t, "the change made while down reaches DNS after the restart", 5*time.Second, func() bool {
		return a.answers("httpbin.v1.back.mesh")
	})
	t.Logf("back in sync %v after the restart", took)
	if !regexp.MustCompile(`retry_in=\d`).MatchString(a.Logs.String()) {
		t.Error("the agent's reconnection attempts do not show their backoff")
	}
}

// A resource that fails validation (served as written by a control plane with
// --skip-validation): the agent NACKs it naming the resource and the field, keeps serving
// its last good model, the control plane logs the NACK; the fix is then accepted.
func TestE2EInvalidResourceNACKed(t *testing.T) {
	e := meshEnv(t)
	cp := e.start("--skip-validation")
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version"))
	waitFor(t, "the control plane logs the NACK", 5*time.Second, func() bool { return cp.Count(`msg="NACK`) > 0 })
	nack := testutil.LineWith(cp.Logs.String(), `msg="NACK`)
	for _, want := range []string{"dataplane=web-1", `virtualoutbound \"by-version\"`, "conf.host"} {
		if !strings.Contains(nack, want) {
			t.Errorf("the control plane's NACK line does not name %s:\n%s", want, nack)
		}
	}
	if !strings.Contains(testutil.LineWith(a.Logs.String(), "(NACK)"), "conf.host") {
		t.Errorf("the agent's refusal does not name the field:\n%s", a.Logs)
	}
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("the agent dropped its last good model after a NACK")
	}
	if m := metricsText(t, e); !strings.Contains(m, `kuma_cp_nacks_total{kind="VirtualOutbound"} 1`) || !strings.Contains(m, "kuma_cp_pushes_total") {
		t.Errorf("the NACK is not counted by kind in /metrics")
	}
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.fixed.mesh"))
	waitFor(t, "the fixed policy is accepted", 5*time.Second, func() bool { return a.answers("httpbin.v1.fixed.mesh") })
}

func metricsText(t *testing.T, e *cpEnv) string {
	t.Helper()
	return httpGet(t, "http://"+e.metrics+"/metrics")
}

// A control plane that validates refuses the broken file itself, logging the file and
// field, and keeps serving that file's last good version.
func TestE2EControlPlaneRefusesInvalidFile(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version"))
	waitFor(t, "the control plane refuses the file", 5*time.Second, func() bool {
		return strings.Contains(testutil.LineWith(cp.Logs.String(), "refused a file"), "conf.host")
	})
	if a.Count(`\(NACK\)`) != 0 {
		t.Error("the agent was sent the broken resource")
	}
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("the last good policy is no longer served")
	}
}

// Wrong token: refused with a clear error on both sides; the agent backs off exponentially
// (no retry storm) and never becomes ready.
func TestE2EWrongTokenRefused(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	other := newCPEnv(t) // another control plane's key
	cases := []struct{ name, token, cpSays, dpSays string }{
		{"token for another dataplane", e.token("httpbin-1", "default"),
			"the token is for another dataplane", `the token is for dataplane \"httpbin-1\"`},
		{"token signed by another key", other.token("web-1", "default"),
			"bad dataplane token", "not signed by this control plane"},
		{"expired token", e.tokenExpiring("web-1", "default", time.Now().Add(-time.Minute)),
			"bad dataplane token", "the token has expired"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := cp.Count(c.cpSays)
			a := startAgent(t, e, e.address, false, "--name", "web-1", "--dataplane-token-file", c.token)
			waitFor(t, "four refusals", 10*time.Second, func() bool {
				return a.Count("refused this dataplane") >= 4
			})
			if !strings.Contains(a.Logs.String(), c.dpSays) {
				t.Errorf("the agent's log does not say %q", c.dpSays)
			}
			if cp.Count(c.cpSays) <= before {
				t.Errorf("the control plane's log does not say %q", c.cpSays)
			}
			checkBackoff(t, a.Logs.String())
			if _, err := os.Stat(a.ready); err == nil {
				t.Error("the agent became ready without a model")
			}
		})
	}
}

// Wrong certificate: the agent does not trust the control plane (another CA); both sides say
// so, and the agent backs off.
func TestE2EWrongCertificateRefused(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	other := newCPEnv(t)
	a := startAgent(t, other, e.address, false, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	waitFor(t, "three attempts", 10*time.Second, func() bool {
		return a.Count("certificate is not trusted; check --ca-cert-file") >= 3
	})
	waitFor(t, "the control plane logs the failed handshake", 5*time.Second, func() bool {
		return cp.Count("TLS handshake failed") > 0
	})
	checkBackoff(t, a.Logs.String())
}

// checkBackoff: the agent's waits between attempts grow (each at least the previous one:
// jitter draws in [d/2, d] and d doubles), so attempts do not storm; and it really waits
// them: the next attempt's failure is logged no sooner than the announced wait (the log's
// times are to the millisecond, so 2 ms are allowed for rounding).
func checkBackoff(t *testing.T, logs string) {
	t.Helper()
	var waits []time.Duration
	var at []time.Time
	for _, m := range regexp.MustCompile(`(?m)^time=(\S+) .*retry_in=(\S+)`).FindAllStringSubmatch(logs, -1) {
		when, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("log time %q: %v", m[1], err)
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("retry_in %q: %v", m[2], err)
		}
		waits = append(waits, d)
		at = append(at, when)
	}
	if len(waits) < 3 {
		t.Fatalf("want at least 3 retries logged, got %d", len(waits))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] {
			t.Errorf("backoff shrank: %v after %v (all: %v)", waits[i], waits[i-1], waits)
		}
		if gap := at[i].Sub(at[i-1]); gap < waits[i-1]-2*time.Millisecond {
			t.Errorf("attempt %d came %v after the previous failure, which announced a wait of %v", i+1, gap, waits[i-1])
		}
	}
	if waits[len(waits)-1] < 2*waits[0] {
		t.Errorf("backoff does not grow: %v", waits)
	}
}

// A stalled stream (the path black-holed, the connection still open): the agent's
// keepalive notices, it reconnects, and a later change arrives over the new connection.
func TestE2EStalledStreamReconnects(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	proxy := newStallProxy(t, e.address)
	a := startAgent(t, e, proxy.addr(), true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"),
		"--cp-keepalive-interval", "300ms")
	if n := proxy.stall(); n == 0 {
		t.Fatal("no connection to stall")
	}
	e.write("vo.yaml", virtualOutbound("default", "{{service}}.{{version}}.after-stall.mesh"))
	waitFor(t, "the change arrives over a new connection", 5*time.Second, func() bool {
		return a.answers("httpbin.v1.after-stall.mesh")
	})
	if a.Count("did not answer the keepalive") == 0 {
		t.Error("the agent did not log the keepalive failure")
	}
	if n := cp.Count(`msg="dataplane connected"`); n < 2 {
		t.Errorf("control plane saw %d connections, want a reconnection", n)
	}
}

// Readiness is held until the first complete sync: an agent started before its control
// plane is not ready; it becomes ready once the control plane comes up.
func TestE2EReadinessHeldUntilFirstSync(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	addr := e.address
	cp.Kill() // the address is known; nothing serves it now
	a := startAgent(t, e, addr, false, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	waitFor(t, "two failed attempts", 10*time.Second, func() bool { return a.Count("reconnecting") >= 2 })
	if _, err := os.Stat(a.ready); err == nil {
		t.Fatal("the agent is ready before any sync")
	}
	e.start()
	a.waitReady()
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("ready but not answering")
	}
}

// An agent restarted while its control plane is down serves the model saved at its last
// sync at once (DNS answers; /ready and the metrics say stale), and the first sync after the
// control plane returns replaces it.
func TestE2ERestartWhileControlPlaneDownServesSavedModel(t *testing.T) {
	e := meshEnv(t)
	cp := e.start()
	work := t.TempDir()
	args := []string{"--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"), "--work-dir", work}
	a := startAgent(t, e, e.address, true, args...)
	waitFor(t, "the model saved in the work dir", 5*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(work, "cp-model.gob"))
		return err == nil
	})
	a.Kill()
	addr := e.address
	cp.Kill()

	b := startAgent(t, e, addr, true, args...)
	if !b.answers("v1.httpbin.mesh") {
		t.Fatal("restarted during the outage: no answer from the saved model")
	}
	admin := b.admin()
	if body := httpGet(t, admin+"/ready"); !strings.Contains(body, "stale") {
		t.Fatalf("/ready does not say the model is stale: %q", body)
	}
	if body := httpGet(t, admin+"/metrics"); !strings.Contains(body, "kuma_dp_model_stale 1") {
		t.Fatal("metrics do not say the model is stale")
	}
	e.start()
	waitFor(t, "in sync again", 10*time.Second, func() bool {
		return !strings.Contains(httpGet(t, admin+"/ready"), "stale")
	})
	if body := httpGet(t, admin+"/metrics"); !strings.Contains(body, "kuma_dp_model_stale 0") {
		t.Fatal("metrics still say stale after the sync")
	}
}

func (a *agent) admin() string {
	a.t.Helper()
	var r struct{ Admin string }
	a.readyJSON(a.ready, &r)
	return "http://" + r.Admin
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Idle and half-done connections are not held: over the per-IP limit they are closed at
// once, the others when the handshake timeout passes; the metrics count each; a real agent
// is then served.
func TestE2EIdleConnectionsNotHeld(t *testing.T) {
	e := meshEnv(t)
	e.start("--max-connections-per-ip", "20", "--handshake-timeout", "1s")
	var conns []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", e.address)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		t.Cleanup(func() { c.Close() })
	}
	metric := func(name string) float64 {
		for _, line := range strings.Split(httpGet(t, "http://"+e.metrics+"/metrics"), "\n") {
			if strings.HasPrefix(line, name+" ") {
				v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
				return v
			}
		}
		return -1
	}
	waitFor(t, "30 connections refused over the per-IP limit", 5*time.Second, func() bool {
		return metric(`kuma_cp_connections_refused_total{limit="per_ip"}`) == 30
	})
	waitFor(t, "the 20 idle connections closed by the handshake timeout", 10*time.Second, func() bool {
		return metric("kuma_cp_connections_open") == 0
	})
	if got := metric("kuma_cp_handshake_failures_total"); got < 20 {
		t.Fatalf("handshake failures %v, want the 20 idle connections counted", got)
	}
	for _, c := range conns { // every one was closed by the server
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection is still held: %v", err)
		}
	}
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("an agent is not served after the flood")
	}
	if got := metric("kuma_cp_agents_connected"); got != 1 {
		t.Fatalf("agents connected %v, want 1", got)
	}
	if m := httpGet(t, "http://"+e.metrics+"/metrics"); !strings.Contains(m, `kuma_cp_build_info{goversion="go`) {
		t.Errorf("/metrics lacks kuma_cp_build_info:\n%s", m)
	}
}

// grpc:// (plain text) against a TLS control plane: the agent says the server speaks TLS
// and what to write, not only gRPC's "server preface: EOF".
func TestE2EPlainTextAgainstTLSExplained(t *testing.T) {
	e := meshEnv(t)
	e.start()
	_, dpBin := binaries(t)
	work := t.TempDir()
	p := startProc(t, "kuma-dp", dpBin, "run", "--cp-address", "grpc://"+e.address, "--name", "web-1",
		"--dataplane-token-file", e.token("web-1", "default"), "--dns-address", "127.0.0.1", "--dns-proxy-port", "0",
		"--admin-address", "127.0.0.1:0", "--dns-upstream", "127.0.0.1:9", "--envoy=false", "--work-dir", work,
		"--cp-retry-backoff", "100ms")
	want := "the control plane speaks TLS but --cp-address is plain text: use grpcs://" + e.address
	waitFor(t, "the agent to explain", 10*time.Second, func() bool { return p.Count(regexp.QuoteMeta(want)) > 0 })
}

// With a maximum connection age the control plane closes each agent's connection in turn;
// the agent reconnects, resumes with the versions it holds, and DNS never stops.
func TestE2EMaxConnectionAgeReconnects(t *testing.T) {
	e := meshEnv(t)
	cp := e.start("--max-connection-age", "1s")
	a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	waitFor(t, "two reconnections", 15*time.Second, func() bool { return cp.Count(`dataplane connected`) >= 3 })
	if !a.answers("v1.httpbin.mesh") {
		t.Fatal("DNS stopped answering across reconnections")
	}
	if n := cp.Count(`dataplane connected.*resumed_resources=[1-9]`); n < 2 {
		t.Fatalf("reconnections resumed with the versions held %d times, want every one after the first", n)
	}
}
