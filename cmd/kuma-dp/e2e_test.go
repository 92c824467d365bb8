package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/miekg/dns"
)

// The end-to-end tests build the real binary and run it as a user would, on loopback with
// kernel-chosen ports read back from --ready-file.

// bins holds the binaries the tests run, built once per test run.
var bins testutil.GoBinaries

// kumaDP builds the kuma-dp binary (once per test run).
func kumaDP(t testing.TB) string {
	t.Helper()
	return bins.Build(t, "kuma-dp", ".")
}

func TestMain(m *testing.M) { bins.RunTests(m) }

// meshDir writes a small mesh: this dataplane (web), httpbin v1 and a VirtualOutbound.
func meshDir(t *testing.T) (dpFile, policies string) {
	t.Helper()
	root := t.TempDir()
	dpFile = filepath.Join(root, "dataplane.yaml")
	policies = filepath.Join(root, "policies")
	writeFile(t, dpFile, testutil.DataplaneWeb)
	writeFile(t, filepath.Join(policies, "httpbin.yaml"), testutil.DataplaneHTTPBin)
	writeFile(t, filepath.Join(policies, "virtual-outbound.yaml"), testutil.VirtualOutbound("default", "{{version}}.{{service}}.mesh"))
	return dpFile, policies
}

// The helpers every end-to-end test file here calls, shared with the control plane's tests.
var (
	writeFile = testutil.WriteFile
	waitFor   = testutil.WaitFor
	lineWith  = testutil.LineWith
)

type readyInfo struct {
	Admin   string   `json:"admin"`
	DNSUDP  []string `json:"dnsUDP"`
	DNSTCP  []string `json:"dnsTCP"`
	Startup string   `json:"startup"`
}

type agentProc struct {
	*testutil.Process
	t     *testing.T
	ready readyInfo
}

// startAgent runs `kuma-dp run` with free ports and waits for its ready file.
func startAgent(t *testing.T, dpFile, policies string, extra ...string) *agentProc {
	t.Helper()
	return startAgentEnv(t, nil, dpFile, policies, extra...)
}

// startAgentEnv is startAgent with extra environment variables.
func startAgentEnv(t *testing.T, env []string, dpFile, policies string, extra ...string) *agentProc {
	t.Helper()
	work := t.TempDir()
	readyFile := filepath.Join(work, "ready.json")
	args := append([]string{"run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", testutil.NXDomainUpstream(t), "--envoy=false", "--work-dir", work, "--ready-file", readyFile,
		"--log-level", "debug"}, extra...)
	cmd := exec.Command(kumaDP(t), args...)
	cmd.Env = append(os.Environ(), env...)
	p := &agentProc{Process: testutil.StartProcess(t, "agent", cmd), t: t}
	p.ReadyJSON(t, readyFile, &p.ready, 10*time.Second)
	return p
}

// query asks the agent's resolver over UDP; it returns the A answers as text, and the rcode.
func (p *agentProc) query(name string, qtype uint16) ([]string, int) {
	p.t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	r, _, err := c.Exchange(m, p.ready.DNSUDP[0])
	if err != nil {
		p.t.Fatalf("query %s: %v", name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	return out, r.Rcode
}

func (p *agentProc) get(path string) (int, string) {
	p.t.Helper()
	resp, err := http.Get("http://" + p.ready.Admin + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestE2EPolicyChangeReachesDNS(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies)

	httpbin, rcode := p.query("httpbin.mesh", dns.TypeA)
	if rcode != dns.RcodeSuccess || len(httpbin) != 1 || !strings.HasPrefix(httpbin[0], "24") {
		t.Fatalf("httpbin.mesh: %v rcode %d", httpbin, rcode)
	}
	if a, _ := p.query("v1.httpbin.mesh", dns.TypeA); len(a) != 1 {
		t.Fatalf("v1.httpbin.mesh: %v", a)
	}
	if a, _ := p.query("httpbin.mesh", dns.TypeAAAA); len(a) != 1 {
		t.Fatalf("httpbin.mesh AAAA: %v", a)
	}
	if code, body := p.get("/ready"); code != 200 {
		t.Fatalf("/ready: %d %s", code, body)
	}

	// Edit the policy: the new name answers and the old one is gone, within a second.
	writeFile(t, filepath.Join(policies, "virtual-outbound.yaml"), testutil.VirtualOutbound("default", "{{service}}-{{version}}.mesh"))
	// The promise is a second (BenchmarkRunPolicyChangeToDNS10k measures it); the test allows
	// five so that a loaded CI machine does not make it flaky, and logs the figure.
	took := waitFor(t, "httpbin-v1.mesh answering after the edit", 5*time.Second, func() bool {
		a, _ := p.query("httpbin-v1.mesh", dns.TypeA)
		return len(a) == 1
	})
	t.Logf("policy edit to new DNS answer: %v", took)
	if a, rcode := p.query("v1.httpbin.mesh", dns.TypeA); len(a) != 0 || rcode != dns.RcodeNameError {
		t.Errorf("v1.httpbin.mesh after the edit: %v rcode %d, want NXDOMAIN", a, rcode)
	}
	// A new dataplane in the directory gives its service a name.
	writeFile(t, filepath.Join(policies, "sub", "backend.yaml"), strings.NewReplacer("httpbin", "backend", "10.0.0.2", "10.0.0.3").Replace(testutil.DataplaneHTTPBin))
	waitFor(t, "backend.mesh answering", 5*time.Second, func() bool { a, _ := p.query("backend.mesh", dns.TypeA); return len(a) == 1 })
	// VIPs are sticky: httpbin.mesh kept its address through both changes.
	if a, _ := p.query("httpbin.mesh", dns.TypeA); len(a) != 1 || a[0] != httpbin[0] {
		t.Errorf("httpbin.mesh moved from %v to %v", httpbin, a)
	}
	code, body := p.get("/vips")
	if code != 200 || !strings.Contains(body, `"hostname": "httpbin-v1.mesh"`) {
		t.Errorf("/vips: %d\n%s", code, body)
	}
	code, body = p.get("/metrics")
	if code != 200 || !strings.Contains(body, `kuma_dp_model_reloads_total{result="applied"}`) {
		t.Errorf("/metrics: %d", code)
	}

	// SIGHUP forces a load even though nothing changed.
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP reload", 5*time.Second, func() bool { return strings.Contains(p.Logs.String(), "trigger=reload") })
}

// One broken file holds back nothing but itself: the agent serves it at its last good
// version, takes the other files' changes meanwhile, says which file and field, stays
// ready, and takes the fixed file like any change.
func TestE2EBrokenPolicyKeepsTheLastGood(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	// The polling watcher here (the other tests use inotify): both reach the same loads.
	p := startAgent(t, dpFile, policies, "--watch", "poll")
	before, _ := p.query("v1.httpbin.mesh", dns.TypeA)
	if len(before) != 1 {
		t.Fatalf("v1.httpbin.mesh: %v", before)
	}

	// The VirtualOutbound behind v1.httpbin.mesh broken in place.
	vo := filepath.Join(policies, "virtual-outbound.yaml")
	writeFile(t, vo, testutil.VirtualOutbound("default", "{{nope}}.mesh"))
	waitFor(t, "the refusal naming the file in the logs", 5*time.Second, func() bool {
		return strings.Contains(p.Logs.String(), "virtual-outbound.yaml")
	})
	line := lineWith(p.Logs.String(), "virtual-outbound.yaml")
	if !strings.Contains(line, "file refused; its last good version keeps serving") || !strings.Contains(line, "conf.host") {
		t.Errorf("refusal line lacks the reason or the field: %s", line)
	}
	if a, _ := p.query("v1.httpbin.mesh", dns.TypeA); len(a) != 1 || a[0] != before[0] {
		t.Fatalf("the last good answer did not stay: %v, was %v", a, before)
	}
	if code, _ := p.get("/ready"); code != 200 {
		t.Errorf("/ready after a refused change: %d", code)
	}
	if _, body := p.get("/metrics"); !strings.Contains(body, "kuma_dp_model_files_refused 1") {
		t.Errorf("/metrics does not count the refused file:\n%s", lineWith(body, "files_refused"))
	}

	// Another file's change is taken while the broken one waits: a new service gets its
	// names, and the kept VirtualOutbound gives them too.
	writeFile(t, filepath.Join(policies, "echo.yaml"), strings.NewReplacer("httpbin-1", "echo-1", "10.0.0.2", "10.0.0.3",
		"kuma.io/service: httpbin", "kuma.io/service: echo").Replace(testutil.DataplaneHTTPBin))
	waitFor(t, "v1.echo.mesh answering beside the broken file", 5*time.Second, func() bool {
		a, _ := p.query("v1.echo.mesh", dns.TypeA)
		return len(a) == 1
	})
	// A new file that never was good is left out, and said so; the rest keeps coming.
	writeFile(t, filepath.Join(policies, "new-broken.yaml"), strings.Replace(testutil.VirtualOutbound("default", "x.mesh"), "conf:", "conf:\n  hosts: typo", 1))
	waitFor(t, "the new broken file named as left out", 5*time.Second, func() bool {
		return strings.Contains(lineWith(p.Logs.String(), "new-broken.yaml"), "left out of the model")
	})

	// Fixing the files is picked up like any change.
	writeFile(t, vo, testutil.VirtualOutbound("default", "fixed.{{version}}.{{service}}.mesh"))
	if err := os.Remove(filepath.Join(policies, "new-broken.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fixed.v1.httpbin.mesh answering", 5*time.Second, func() bool {
		a, _ := p.query("fixed.v1.httpbin.mesh", dns.TypeA)
		return len(a) == 1
	})
	waitFor(t, "every file accepted again", 5*time.Second, func() bool {
		return strings.Contains(p.Logs.String(), "every file accepted again")
	})
}

// A file broken while the agent runs is still served at its last good version by the
// agent restarted on the same work dir (its decode cache keeps that version), as the agent
// before the restart served it: a restart does not drop a policy the mesh was using.
func TestE2EBrokenPolicyKeptAcrossARestart(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	work := t.TempDir()
	p := startAgent(t, dpFile, policies, "--work-dir", work)
	before, _ := p.query("v1.httpbin.mesh", dns.TypeA)
	if len(before) != 1 {
		t.Fatalf("v1.httpbin.mesh: %v", before)
	}
	writeFile(t, filepath.Join(policies, "virtual-outbound.yaml"), testutil.VirtualOutbound("default", "{{nope}}.mesh"))
	waitFor(t, "the refusal", 5*time.Second, func() bool {
		return strings.Contains(p.Logs.String(), "file refused; its last good version keeps serving")
	})
	time.Sleep(300 * time.Millisecond) // the decode cache's write after the update (it removed the file's entry)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}

	again := startAgent(t, dpFile, policies, "--work-dir", work)
	if a, _ := again.query("v1.httpbin.mesh", dns.TypeA); len(a) != 1 || a[0] != before[0] {
		t.Errorf("after the restart v1.httpbin.mesh = %v, want %v (the last good VirtualOutbound)", a, before)
	}
	if line := lineWith(again.Logs.String(), "virtual-outbound.yaml"); !strings.Contains(line, "file refused; its last good version keeps serving") {
		t.Errorf("the restarted agent does not say it serves the last good version: %s", line)
	}
}

// Polling, a file that stays broken is named once, however many polls pass, while the
// other files' changes are taken; /ready stays 200 and the count stays 1.
func TestE2EBrokenPolicyLoggedOnceWhilePolling(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies, "--watch", "poll")
	writeFile(t, filepath.Join(policies, "virtual-outbound.yaml"), testutil.VirtualOutbound("default", "{{nope}}.mesh"))
	waitFor(t, "the refusal", 5*time.Second, func() bool {
		return strings.Contains(p.Logs.String(), "file refused; its last good version keeps serving")
	})
	for i := range 3 { // other files change, polls pass
		writeFile(t, filepath.Join(policies, fmt.Sprintf("echo-%d.yaml", i)), strings.NewReplacer("httpbin-1", fmt.Sprintf("echo-%d", i),
			"10.0.0.2", fmt.Sprintf("10.0.0.%d", 10+i), "kuma.io/service: httpbin", fmt.Sprintf("kuma.io/service: echo%d", i)).Replace(testutil.DataplaneHTTPBin))
		waitFor(t, fmt.Sprintf("v1.echo%d.mesh", i), 5*time.Second, func() bool {
			a, _ := p.query(fmt.Sprintf("v1.echo%d.mesh", i), dns.TypeA)
			return len(a) == 1
		})
	}
	time.Sleep(1500 * time.Millisecond) // polls with nothing changed
	if n := strings.Count(p.Logs.String(), "msg=\"file refused"); n != 1 {
		t.Errorf("the broken file named %d times, want once", n)
	}
	if code, _ := p.get("/ready"); code != 200 {
		t.Errorf("/ready: %d", code)
	}
	if _, body := p.get("/metrics"); !strings.Contains(body, "kuma_dp_model_files_refused 1") {
		t.Errorf("/metrics: %s", lineWith(body, "files_refused"))
	}
}

// A broken policy file at start: the agent starts without it, serving the other files.
// One bad file in a directory every pod reads must not keep every new agent from starting.
func TestE2EBrokenPolicyAtStartLeftOut(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, filepath.Join(policies, "zz-broken.yaml"), strings.Replace(testutil.VirtualOutbound("default", "x.mesh"), "conf:", "conf:\n  hosts: typo", 1))
	p := startAgent(t, dpFile, policies)
	if a, _ := p.query("httpbin.mesh", dns.TypeA); len(a) != 1 {
		t.Fatalf("httpbin.mesh = %v: the other files must be served", a)
	}
	line := lineWith(p.Logs.String(), "zz-broken.yaml")
	if !strings.Contains(line, "left out of the model") || !strings.Contains(line, "hosts") {
		t.Errorf("the start does not name the file left out and its field: %s", line)
	}
}

func TestE2ESIGTERMDrainsAndExits(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	const drain = 1500 * time.Millisecond
	// With Envoy (the stand-in): without one there is nothing to drain.
	p := startAgent(t, dpFile, policies, "--drain-time", drain.String(), "--envoy=true", "--binary-path", fakeEnvoy(t))
	readyFile := p.Cmd.Args[indexOf(p.Cmd.Args, "--ready-file")+1]
	start := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/ready 503 TERMINATING", drain, func() bool {
		code, body := p.get("/ready")
		return code == 503 && strings.TrimSpace(body) == "TERMINATING"
	})
	// DNS keeps answering while the apps drain.
	if a, _ := p.query("httpbin.mesh", dns.TypeA); len(a) != 1 {
		t.Errorf("DNS stopped answering during the drain: %v", a)
	}
	select {
	case <-p.Exited():
	case <-time.After(drain + 2*time.Second):
		t.Fatal("did not exit within the drain time (+2s)")
	}
	took := time.Since(start)
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	if took < drain {
		t.Errorf("exited after %v, before the %v drain", took, drain)
	}
	t.Logf("SIGTERM to exit 0: %v (drain %v)", took, drain)
	// Nothing left behind: the ready file is gone and the ports are free again.
	if _, err := os.Stat(readyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ready file left behind: %v", err)
	}
	assertPortFree(t, "tcp", p.ready.Admin)
	assertPortFree(t, "udp", p.ready.DNSUDP[0])
	assertPortFree(t, "tcp", p.ready.DNSTCP[0])
}

// Without Envoy a SIGTERM stops the agent at once, whatever the drain time, and a new agent
// can bind the same ports right away.
func TestE2ENoEnvoyStopsAtOnce(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies, "--drain-time", "1m")
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("an agent without Envoy waited for its drain time")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	assertPortFree(t, "tcp", p.ready.Admin)
	assertPortFree(t, "udp", p.ready.DNSUDP[0])
}

func TestE2ESecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies, "--drain-time", "1m", "--envoy=true", "--binary-path", fakeEnvoy(t))
	start := time.Now()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "draining", 2*time.Second, func() bool { code, _ := p.get("/ready"); return code == 503 })
	_ = p.Cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.Exited():
	case <-time.After(3 * time.Second):
		t.Fatal("a second signal did not stop the agent")
	}
	if p.Err() != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("exit %v after %v", p.Err(), time.Since(start))
	}
}

// The dataplane file is the model's frame: without it nothing can be served, and the start
// fails naming its file and field.
func TestE2EInvalidFirstModelExits1(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, dpFile, strings.Replace(testutil.DataplaneWeb, "  inbound:", "  inbounds:", 1))
	out := runExpectingExit(t, exitInvalid, dpFile, policies, t.TempDir())
	if !strings.Contains(string(out), "dataplane.yaml") || !strings.Contains(string(out), "inbounds") {
		t.Fatalf("output does not name the file and field:\n%s", out)
	}
}

// runExpectingExit runs `kuma-dp run` on the mesh files with work as its work dir (no Envoy,
// ports left to the kernel, an upstream that never answers) and fails the test unless it
// exits with code; it returns the output.
func runExpectingExit(t *testing.T, code int, dpFile, policies, work string) string {
	t.Helper()
	out, err := exec.Command(kumaDP(t), "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0", "--envoy=false", "--work-dir", work, "--dns-upstream", "127.0.0.1:9").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != code {
		t.Fatalf("want exit %d, got %v:\n%s", code, err, out)
	}
	return string(out)
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

func assertPortFree(t *testing.T, network, addr string) {
	t.Helper()
	var c io.Closer
	var err error
	if network == "udp" {
		c, err = net.ListenPacket("udp", addr)
	} else {
		c, err = net.Listen("tcp", addr)
	}
	if err != nil {
		t.Errorf("%s %s still bound after exit: %v", network, addr, err)
		return
	}
	c.Close()
}

func TestE2EDataplaneVars(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, dpFile, strings.NewReplacer("name: web-1", "name: {{ name }}", "address: 10.0.0.1", "address: {{address}}").Replace(testutil.DataplaneWeb))
	p := startAgentEnv(t, []string{"KUMA_DATAPLANE_RUNTIME_RESOURCE_VARS=name=web-7"}, dpFile, policies, "--dataplane-var", "name=web-7,address=10.7.7.7")
	code, body := p.get("/config_dump")
	var dump struct {
		Model struct {
			Self struct {
				Name       string `json:"name"`
				Networking struct {
					Address string `json:"address"`
				} `json:"networking"`
			}
		} `json:"model"`
	}
	if err := json.Unmarshal([]byte(body), &dump); code != 200 || err != nil {
		t.Fatalf("/config_dump: %d %v", code, err)
	}
	if dump.Model.Self.Name != "web-7" || dump.Model.Self.Networking.Address != "10.7.7.7" {
		t.Fatalf("rendered dataplane: %+v", dump.Model.Self)
	}
}

// Two agents on one work dir: the second is refused, naming the directory and the first's
// PID, and the first keeps serving.
func TestE2EWorkDirLocked(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	work := t.TempDir()
	first := startAgent(t, dpFile, policies, "--work-dir", work)
	out := runExpectingExit(t, exitInvalid, dpFile, policies, work) // the second agent
	want := fmt.Sprintf("work dir %q is in use by another kuma-dp (pid %d)", work, first.Cmd.Process.Pid)
	if !strings.Contains(string(out), strings.ReplaceAll(want, `"`, `\"`)) && !strings.Contains(string(out), want) {
		t.Fatalf("second agent's message does not name the dir and the first's PID (%s):\n%s", want, out)
	}
	if a, _ := first.query("httpbin.mesh", dns.TypeA); len(a) != 1 {
		t.Fatal("the first agent stopped answering")
	}
}

// A start that fails (an invalid first model) removes the work dir it created.
func TestE2EFailedStartLeavesNoWorkDir(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, dpFile, strings.Replace(testutil.DataplaneWeb, "  inbound:", "  inbounds:", 1))
	parent := t.TempDir()
	work := filepath.Join(parent, "new", "work")
	runExpectingExit(t, exitInvalid, dpFile, policies, work)
	if _, err := os.Stat(filepath.Join(parent, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed start left %s behind (%v)", filepath.Join(parent, "new"), err)
	}
}

// Started by `go run` (a parent process named go), the agent stops when its parent is
// killed: `kill $!` after the README's first command leaves no agent holding the ports.
func TestE2EDiesWithGoRun(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	dir := t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	b, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	goParent := filepath.Join(dir, "go") // a shell whose process name is "go", as `go run` is
	if err := os.WriteFile(goParent, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready.json")
	script := fmt.Sprintf("%s run --dataplane-file %s --policies-dir %s --dns-address 127.0.0.1 --dns-proxy-port 0 --admin-address 127.0.0.1:0 --dns-upstream 127.0.0.1:9 --envoy=false --work-dir %s --ready-file %s & wait",
		kumaDP(t), dpFile, policies, filepath.Join(dir, "work"), ready)
	parent := testutil.Start(t, "go run stand-in", goParent, "-c", script)
	logs := parent.Logs
	var info struct {
		PID   int    `json:"pid"`
		Admin string `json:"admin"`
	}
	waitFor(t, "the agent ready", 15*time.Second, func() bool {
		b, err := os.ReadFile(ready)
		return err == nil && json.Unmarshal(b, &info) == nil && info.PID > 0
	})
	parent.Kill() // like `kill -9 $!` on go run
	waitFor(t, "the agent gone with its parent", 5*time.Second, func() bool {
		return syscall.Kill(info.PID, 0) != nil
	})
	if !strings.Contains(logs.String(), "dies_with_go_run=true") {
		t.Errorf("the first log line does not say it dies with go run:\n%s", logs)
	}
	assertPortFree(t, "tcp", info.Admin)
}

// A busy DNS or admin port: the error names the flag, the variable and the config field,
// once; the failed start leaves no work dir.
func TestE2EBusyPortsNamed(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	_, dnsPort, _ := net.SplitHostPort(udp.LocalAddr().String())
	for _, tc := range []struct {
		name, dnsPort, admin, want string
	}{
		{"dns", dnsPort, "127.0.0.1:0", "--dns-proxy-port (KUMA_DNS_PROXY_PORT, dns.proxyPort in --config)"},
		{"admin", "0", tcp.Addr().String(), "--admin-address (KUMA_ADMIN_ADDRESS, admin.address in --config)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "work")
			out, err := exec.Command(kumaDP(t), "run", "--dataplane-file", dpFile, "--policies-dir", policies,
				"--dns-address", "127.0.0.1", "--dns-proxy-port", tc.dnsPort, "--admin-address", tc.admin,
				"--envoy=false", "--work-dir", work, "--dns-upstream", "127.0.0.1:9").CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitInvalid {
				t.Fatalf("want exit %d, got %v:\n%s", exitInvalid, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("the error does not name %s:\n%s", tc.want, out)
			}
			if n := strings.Count(string(out), "address already in use"); n != 1 {
				t.Fatalf("the error is logged %d times, want once:\n%s", n, out)
			}
			if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the failed start left its work dir (%v)", err)
			}
		})
	}
}

// The first example of `kuma-dp run --help` (the README's main job), run as written (only
// the ports made free ones): the agent becomes ready and answers httpbin.mesh, as the
// example's dig line expects.
func TestE2ERunHelpExampleWorks(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	dispatch([]string{"run", "--help"}, &help, &help)
	var example []string
	for _, line := range strings.Split(help.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "kuma-dp" && f[1] == "run" && example == nil && !strings.Contains(line, "[flags]") {
			example = f[2:]
		}
	}
	if example == nil || !strings.Contains(help.String(), "dig @127.0.0.1 -p 15053 httpbin.mesh") {
		t.Fatalf("no run example with its dig line:\n%s", help.String())
	}
	for i, a := range example {
		if strings.HasPrefix(a, "testdata/") {
			example[i] = "../../" + a
		}
	}
	p := startAgent(t, "../../testdata/mesh/dataplane.yaml", "../../testdata/mesh/policies", example...)
	if a, _ := p.query("httpbin.mesh", dns.TypeA); len(a) != 1 {
		t.Fatalf("the example's agent does not answer httpbin.mesh: %v", a)
	}
}

// A dataplane listing Kuma's reachableServices: its agent answers the reachable services'
// names only; when its dataplane file lists another service, the names follow at the next
// load (the directory decoded again for the new list).
func TestE2EReachableServices(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	writeFile(t, filepath.Join(policies, "sub", "backend.yaml"), strings.NewReplacer("httpbin", "backend", "10.0.0.2", "10.0.0.3").Replace(testutil.DataplaneHTTPBin))
	reaching := func(svc string) string {
		return testutil.DataplaneWeb + "  transparentProxying:\n    reachableServices: [" + svc + "]\n"
	}
	writeFile(t, dpFile, reaching("httpbin"))
	p := startAgent(t, dpFile, policies)
	for _, name := range []string{"httpbin.mesh", "v1.httpbin.mesh", "web.mesh"} {
		if a, rcode := p.query(name, dns.TypeA); len(a) != 1 || rcode != dns.RcodeSuccess {
			t.Errorf("%s: %v rcode %d, want an answer (reachable, or the dataplane's own)", name, a, rcode)
		}
	}
	if a, rcode := p.query("backend.mesh", dns.TypeA); len(a) != 0 || rcode != dns.RcodeNameError {
		t.Errorf("backend.mesh: %v rcode %d, want NXDOMAIN (not reachable)", a, rcode)
	}

	writeFile(t, dpFile, reaching("backend"))
	waitFor(t, "backend.mesh answering after the list changed", 5*time.Second, func() bool {
		a, _ := p.query("backend.mesh", dns.TypeA)
		return len(a) == 1
	})
	if a, rcode := p.query("httpbin.mesh", dns.TypeA); len(a) != 0 || rcode != dns.RcodeNameError {
		t.Errorf("httpbin.mesh after the list changed: %v rcode %d, want NXDOMAIN", a, rcode)
	}
}

// The dataplane file edited to another dataplane while the agent runs (no --name given:
// the identity came from the file): the change is refused naming the file and the field,
// as with the control plane's link and as when --name is given - the agent kept its work
// dir, lock and VIP state of web-1 and served as web-2.
func TestE2EDataplaneFileEditedToAnotherIdentity(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	p := startAgent(t, dpFile, policies)
	for _, edit := range []struct{ from, to, field string }{
		{"name: web-1", "name: web-2", "name"},
		{"mesh: default", "mesh: other", "mesh"},
	} {
		mark := len(p.Logs.String())
		writeFile(t, dpFile, strings.Replace(testutil.DataplaneWeb, edit.from, edit.to, 1))
		waitFor(t, "the refusal of "+edit.to, 5*time.Second, func() bool {
			return strings.Contains(lineWith(p.Logs.String()[mark:], "change refused"), dpFile)
		})
		line := lineWith(p.Logs.String()[mark:], "change refused")
		if !strings.Contains(line, "field="+edit.field) || !strings.Contains(line, edit.to[len(edit.field)+2:]) {
			t.Errorf("the refusal does not name the field %s and the value: %s", edit.field, line)
		}
		_, dump := p.get("/config_dump")
		if !strings.Contains(dump, `"name": "web-1"`) || strings.Contains(dump, `"name": "web-2"`) {
			t.Errorf("after the edit to %s, the model served is not web-1's", edit.to)
		}
		mark = len(p.Logs.String())
		writeFile(t, dpFile, testutil.DataplaneWeb)
		waitFor(t, "the file restored read", 5*time.Second, func() bool {
			return strings.Contains(p.Logs.String()[mark:], "model unchanged")
		})
	}
}

// A ready file left by a run that was killed (SIGKILL, the OOM killer) is removed at start:
// it named the dead run's addresses, and whoever waits for the file (a probe, a script)
// took the new agent for ready while it was still waiting for its control plane.
func TestE2EStaleReadyFileRemovedAtStart(t *testing.T) {
	t.Parallel()
	dpFile, _ := meshDir(t)
	work := t.TempDir()
	readyFile := filepath.Join(work, "ready.json")
	writeFile(t, readyFile, `{"pid": 1, "admin": "127.0.0.1:1", "dnsUDP": ["127.0.0.1:1"]}`+"\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	p := testutil.Start(t, "agent", kumaDP(t), "run", "--dataplane-file", dpFile, "--cp-address", "grpc://"+dead,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0", "--envoy=false",
		"--work-dir", filepath.Join(work, "wd"), "--ready-file", readyFile, "--cp-retry-backoff", "50ms")
	logs := p.Logs
	waitFor(t, "the agent trying its control plane", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "control plane link down")
	})
	if _, err := os.Stat(readyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready file of a dead run is still there while the agent is not ready (%v); logs:\n%s", err, logs)
	}
}

// A ready file in a directory that does not exist is refused at start naming the setting:
// the agent served without ever writing it, and whoever waited for it waited for ever.
func TestE2EReadyFileInMissingDirRefused(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	work := t.TempDir()
	missing := filepath.Join(work, "no-such-dir", "ready.json")
	cmd := exec.Command(kumaDP(t), "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0", "--envoy=false",
		"--work-dir", filepath.Join(work, "wd"), "--ready-file", missing)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running with a ready file it cannot write:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "--ready-file") || !strings.Contains(string(out), missing) {
		t.Errorf("exit %v, output:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(work, "wd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start left its work dir (%v)", err)
	}
}
