package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// inspectRow is the row of dataplane name in `kuma-cp inspect dataplanes` (api: the API's
// address): its STATUS and REPLICAS.
func inspectRow(t *testing.T, api, name string) (status, replicas string) {
	t.Helper()
	rc, out, errb := run("inspect", "dataplanes", "--api-url", "http://"+api)
	if rc != exitOK || !strings.HasPrefix(out, "MESH ") || !strings.Contains(out, "STATUS") {
		t.Fatalf("inspect dataplanes: exit %d, stderr %q, stdout:\n%s", rc, errb, out)
	}
	m := regexp.MustCompile(`(?m)^default\s+` + regexp.QuoteMeta(name) + `\s.*\s(Online|Offline)\s+(\S+)\s+\S+$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("inspect dataplanes: no row of %s:\n%s", name, out)
	}
	return m[1], m[2]
}

// kuma-cp inspect dataplanes on etcd: an agent connected to one replica is Online, with
// that replica, whichever replica's API is asked (each publishes its agents in etcd); a
// dataplane without an agent is Offline; an agent killed goes Offline.
func TestE2EInspectDataplanesOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	e := newCPEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr1, api1 := e.startReplica(c, "replica-1")
	_, _, api2 := e.startReplica(c, "replica-2")
	inventory := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inventory, []byte(dpWeb+"---\n"+dpHTTPBin), 0o644); err != nil {
		t.Fatal(err)
	}
	e.kumaCP("apply", "-f", inventory, "--api-url", "http://"+api1, "--admin-token-file", e.path("admin.token"))
	if st, _ := inspectRow(t, api2, "web-1"); st != "Offline" {
		t.Fatalf("web-1 before its agent: %s", st)
	}
	a := startAgent(t, e, addr1, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
	for _, api := range []string{api1, api2} {
		waitFor(t, "web-1 Online on replica-1, asked at "+api, 10*time.Second, func() bool {
			st, reps := inspectRow(t, api, "web-1")
			return st == "Online" && reps == "replica-1"
		})
		if st, reps := inspectRow(t, api, "httpbin-1"); st != "Offline" || reps != "-" {
			t.Errorf("httpbin-1 (no agent), asked at %s: %s %s", api, st, reps)
		}
	}
	a.Kill()
	waitFor(t, "web-1 Offline once its agent is killed", 10*time.Second, func() bool {
		st, _ := inspectRow(t, api2, "web-1")
		return st == "Offline"
	})
}

// On the directory store (one control plane): an agent connected is Online, the others
// Offline.
func TestE2EInspectDataplanesOnTheDirectory(t *testing.T) {
	e := meshEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start("--admin-token-file", e.path("admin.token"), "--api-address", "127.0.0.1:0")
	startAgent(t, e, e.address, true, "--name", "httpbin-1", "--mesh", "default", "--dataplane-token-file", e.token("httpbin-1", "default"))
	waitFor(t, "httpbin-1 Online", 10*time.Second, func() bool {
		st, reps := inspectRow(t, e.api, "httpbin-1")
		return st == "Online" && reps == "-"
	})
	if st, _ := inspectRow(t, e.api, "web-1"); st != "Offline" {
		t.Errorf("web-1 (no agent): %s", st)
	}
}
