package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/certs"
)

// docs/routes.md's walkthrough, from `router install` to a `dig` that answers: the bundled
// shard (testdata/routes/shard-a.yaml: a router wanting 2 replicas and a route) applied, no
// replica yet (0/2, not Available); `router install -o dataplanes` applied; `router install
// -o systemd` run as the units say (their ExecStart, with the files where the units put
// them: here a temporary directory, no Envoy, and free ports since both replicas share this
// host):
// the route's name answers with both replicas, at kuma-cp's DNS (dig when installed), and
// get routers says 2/2; -o yaml prints a Deployment per replica. The router changed to 3
// replicas: Degraded at 2/3, and install prints the new desired state.
func TestE2ERouterInstallToDig(t *testing.T) {
	env := newShardEnv(t, 1)
	e := env.e
	cp := env.startReplica(t, "replica-1")
	api := "http://" + cp.api
	tok := e.path("admin.token")
	root, _ := filepath.Abs("../..")
	out := e.kumaCP("apply", "--wait", "-f", filepath.Join(root, "testdata/routes/shard-a.yaml"), "--admin-token-file", tok, "--api-url", api)
	if !strings.Contains(out, "shop-www.shard-a.apps.example.com") {
		t.Fatalf("apply --wait: %s", out)
	}
	const name = "shop-www.shard-a.apps.example.com"
	waitFor(t, "no replica: 0/2, not available", 10*time.Second, func() bool {
		return strings.Contains(e.kumaCP("get", "routers", "--api-url", api), "0/2    False")
	})
	install := func(args ...string) string {
		t.Helper()
		return e.kumaCP(append([]string{"router", "install", "shard-a", "--api-url", api, "--address", "127.0.0.11", "--address", "127.0.0.12"}, args...)...)
	}
	dps := filepath.Join(t.TempDir(), "dataplanes.yaml")
	if err := os.WriteFile(dps, []byte(install("-o", "dataplanes")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := e.kumaCP("apply", "-f", dps, "--admin-token-file", tok, "--api-url", api); !strings.Contains(out, "shard-a-0 created") || !strings.Contains(out, "shard-a-1 created") {
		t.Fatalf("apply the replicas' Dataplanes: %s", out)
	}
	creds := []string{"--cp-address", "grpcs://" + cp.link, "--ca-cert-file", e.path(certs.CACertFile), "--token-key-file", e.path(certs.TokenKeyFile)}
	if y := install(append(creds, "-o", "yaml")...); strings.Count(y, "kind: Deployment") != 2 || !strings.Contains(y, "kind: PodDisruptionBudget") {
		t.Errorf("-o yaml:\n%s", y)
	}
	_, dpBin := binaries(t)
	dir := t.TempDir()
	install(append(creds, "-o", "systemd", "--out-dir", dir, "--kuma-dp-path", dpBin)...)
	for _, r := range []string{"shard-a-0", "shard-a-1"} {
		unit, err := os.ReadFile(filepath.Join(dir, "kuma-dp-"+r+".service"))
		if err != nil {
			t.Fatal(err)
		}
		var exec string
		for _, line := range strings.Split(string(unit), "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				exec = v
			}
		}
		// as docs/routes.md runs it: the files in a directory of its own, no Envoy, both
		// replicas on this host (free ports for their resolvers and admin endpoints)
		exec = strings.ReplaceAll(exec, "/etc/kuma-dp/routers/shard-a", dir)
		exec = strings.ReplaceAll(exec, "/var/lib/kuma-dp/"+r, t.TempDir())
		args := strings.Fields(exec)
		if args[0] != dpBin || !strings.HasPrefix(args[len(args)-1], "--binary-path=") {
			t.Fatalf("ExecStart: %s", exec)
		}
		ready := filepath.Join(t.TempDir(), "ready.json")
		a := &agent{ready: ready}
		a.proc = startProc(t, "kuma-dp "+r, args[0], append(args[1:len(args)-1], "--envoy=false", "--dns-proxy-port", "0",
			"--admin-address", "127.0.0.1:0", "--ready-file", ready)...)
		a.waitReady()
	}
	both := []string{"127.0.0.11", "127.0.0.12"}
	waitFor(t, "the route's name answers with both replicas", 15*time.Second, func() bool {
		return slices.Equal(benchAddrs(cp.dns, name), both) && strings.Contains(e.kumaCP("get", "routers", "--api-url", api), "2/2    True       False")
	})
	if dig, err := exec.LookPath("dig"); err == nil {
		host, port, _ := strings.Cut(cp.dns, ":")
		out, err := exec.Command(dig, "+short", "@"+host, "-p", port, name).CombinedOutput()
		got := strings.Fields(string(out))
		slices.Sort(got)
		if err != nil || !slices.Equal(got, both) {
			t.Errorf("dig +short @%s -p %s %s: %v\n%s", host, port, name, err, out)
		}
	}
	// the router changed (3 replicas wanted): Degraded at 2/3, and install prints the new
	// desired state
	shard, err := os.ReadFile(filepath.Join(root, "testdata/routes/shard-a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	three := filepath.Join(t.TempDir(), "shard-a.yaml")
	if err := os.WriteFile(three, bytes.Replace(shard, []byte("\n---\n"), []byte("\nreplicas: 3\n---\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := e.kumaCP("apply", "-f", three, "--admin-token-file", tok, "--api-url", api); !strings.Contains(out, "routers default/shard-a updated") {
		t.Fatalf("apply replicas: 3: %s", out)
	}
	waitFor(t, "2 of 3: degraded", 10*time.Second, func() bool {
		return strings.Contains(e.kumaCP("get", "routers", "--api-url", api), "2/3    True       True")
	})
	if y := install(append(creds, "-o", "yaml", "--address", "127.0.0.13")...); strings.Count(y, "kind: Deployment") != 3 || !strings.Contains(y, "router-shard-a-2") {
		t.Errorf("-o yaml after replicas: 3:\n%s", y)
	}
	var b bytes.Buffer
	if rc := dispatch([]string{"router", "install", "shard-a", "--api-url", api, "--address", "127.0.0.11", "-o", "dataplanes"}, &b, &b); rc != exitFail ||
		!strings.Contains(b.String(), "router shard-a wants 3 replicas (replicas): give one --address each, got 1") {
		t.Errorf("one address for three replicas: exit %d\n%s", rc, b.String())
	}
}
