package gui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/kumadp/kuma-dp/mesh"
)

// A real control plane for the GUI's tests: kuma-cp serve on a three-member etcd with its
// router shard DNS, the bundled example mesh and a router shard applied through the API,
// and real kuma-dp agents connected to it.

var bins testutil.GoBinaries

func TestMain(m *testing.M) { bins.RunTests(m) }

// cpEnv is the control plane and its agents.
type cpEnv struct {
	t        *testing.T
	etcd     *etcdtest.Cluster
	dir      string
	address  string // replica-1's agents' server (the leader: started first)
	address2 string // replica-2's
	apiURL   string // replica-1's API, which the browser reads
	api      *api.Client
	cpBin    string
	agents   map[string]*testutil.Process
	dpBin    string
	key      []byte
	upstream string
}

// shards are, beside testdata/routes/shard-a.yaml (its router and route web.shop): shard-a's
// replica (an agent runs for it), a second shard whose replica has no agent (not ready),
// a user's name on shard-a and the same name claimed later from another namespace
// (refused), and a route on the second shard.
const shards = `type: Dataplane
mesh: default
name: gateway-a-1
networking:
  address: 127.0.0.21
  inbound:
  - port: 8443
    tags:
      kuma.io/service: gateway-a
---
type: Router
name: shard-b
dns: shard-b.apps.example.com
routeSelector: {shard: b}
dataplanes: {kuma.io/service: gateway-b}
---
type: Dataplane
mesh: default
name: gateway-b-1
networking:
  address: 127.0.0.22
  inbound:
  - port: 8443
    tags:
      kuma.io/service: gateway-b
---
type: Route
name: store
namespace: shop
labels: {shard: a}
host: www.acme.test
dnsType: user
to: {service: web, port: 8080}
---
type: Route
name: store
namespace: blog
labels: {shard: a}
host: www.acme.test
dnsType: user
to: {service: web, port: 8080}
---
type: Route
name: docs
namespace: blog
labels: {shard: b}
host: docs
to: {service: web, port: 8080}
`

// baseEnv is what every control plane of the tests needs: the binaries, a CA and server
// certificate, the token key and the admin token.
func baseEnv(t *testing.T) *cpEnv {
	t.Helper()
	e := &cpEnv{t: t, dir: t.TempDir(), agents: map[string]*testutil.Process{},
		cpBin: bins.Build(t, "kuma-cp", "../../cmd/kuma-cp"), dpBin: bins.Build(t, "kuma-dp", "../../cmd/kuma-dp")}
	if err := certs.Write(e.dir, []string{"localhost", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.key, err = token.ReadKey(e.path(certs.TokenKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("admin.token"), []byte("gui-admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.upstream = testutil.NXDomainUpstream(t)
	return e
}

// newCPEnv is two replicas of kuma-cp on a three-member etcd, replica-1 leading.
func newCPEnv(t *testing.T) *cpEnv {
	t.Helper()
	e := baseEnv(t)
	e.etcd = etcdtest.Start(t, 3)
	var api1 string
	e.address, api1 = e.startReplica("replica-1")
	e.apiURL = "http://" + api1
	e.api = api.NewClient(e.apiURL, "gui-admin")
	testutil.WaitFor(t, "replica-1 leading", 10*time.Second, func() bool {
		st, err := e.api.Status(context.Background())
		return err == nil && strings.Contains(string(st), `"leader":"replica-1"`)
	})
	e.address2, _ = e.startReplica("replica-2")
	return e
}

// newDirEnv is kuma-cp serving a directory (the default store) with its API on, the
// directory holding the bundled example mesh.
func newDirEnv(t *testing.T) (e *cpEnv, resources string) {
	t.Helper()
	e = baseEnv(t)
	resources = filepath.Join(e.dir, "resources")
	if err := os.MkdirAll(resources, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, src := range files(t, "testdata/mesh/policies", "testdata/mesh/dataplane.yaml") {
		if err := os.WriteFile(filepath.Join(resources, filepath.Base(src.Name)), src.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ready := e.path("dir-ready.json")
	p := testutil.Start(t, "kuma-cp dir", e.cpBin, "serve", "--resources-dir", resources,
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "", "--admin-token-file", e.path("admin.token"),
		"--tls-cert-file", e.path(certs.TLSCertFile), "--tls-key-file", e.path(certs.TLSKeyFile), "--token-key-file", e.path(certs.TokenKeyFile),
		"--ready-file", ready)
	var r struct{ Address, API string }
	p.ReadyJSON(t, ready, &r, 30*time.Second)
	e.address, e.apiURL = r.Address, "http://"+r.API
	e.api = api.NewClient(e.apiURL, "gui-admin")
	return e, resources
}

// startReplica runs a replica of kuma-cp serve on the env's etcd (its shard DNS on a port
// of its own); it returns its agents' and API addresses.
func (e *cpEnv) startReplica(id string) (address, apiAddr string) {
	e.t.Helper()
	ready := e.path(id + "-ready.json")
	p := testutil.Start(e.t, "kuma-cp "+id, e.cpBin, "serve", "--store", "etcd", "--etcd-endpoints", strings.Join(e.etcd.Endpoints(), ","),
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--dns-address", "127.0.0.1:0",
		"--dns-user-zone", "acme.test", "--admin-token-file", e.path("admin.token"), "--replica-id", id, "--leader-lease-ttl", "2s",
		"--tls-cert-file", e.path(certs.TLSCertFile), "--tls-key-file", e.path(certs.TLSKeyFile), "--token-key-file", e.path(certs.TokenKeyFile),
		"--ready-file", ready)
	var r struct{ Address, API string }
	p.ReadyJSON(e.t, ready, &r, 30*time.Second)
	return r.Address, r.API
}

func (e *cpEnv) path(name string) string { return filepath.Join(e.dir, name) }

// apply applies files (paths relative to the repository's top, or documents) through the API.
func (e *cpEnv) apply(sources ...api.Source) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.api.ApplyAll(ctx, sources); err != nil {
		e.t.Fatalf("apply: %v", err)
	}
}

// files are the files at paths (relative to the repository's top; a directory's files).
func files(t *testing.T, paths ...string) []api.Source {
	t.Helper()
	var out []api.Source
	for _, p := range paths {
		full := filepath.Join("../..", p)
		names := []string{full}
		if fi, err := os.Stat(full); err == nil && fi.IsDir() {
			names, _ = filepath.Glob(filepath.Join(full, "*.yaml"))
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, api.Source{Name: n, Data: b})
		}
	}
	return out
}

// startAgent runs kuma-dp for dataplane name of mesh default, its dataplane from the
// control plane at address; it returns once the agent is ready.
func (e *cpEnv) startAgent(name, address string) *testutil.Process {
	e.t.Helper()
	work := e.t.TempDir()
	tok := filepath.Join(work, "token")
	if err := os.WriteFile(tok, []byte(token.Issue(e.key, token.Identity{Name: name, Mesh: "default"})), 0o600); err != nil {
		e.t.Fatal(err)
	}
	ready := filepath.Join(work, "ready.json")
	p := testutil.Start(e.t, "kuma-dp "+name, e.dpBin, "run", "--cp-address", "grpcs://"+address, "--ca-cert-file", e.path(certs.CACertFile),
		"--dataplane-token-file", tok, "--name", name, "--mesh", "default",
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0", "--dns-upstream", e.upstream,
		"--envoy=false", "--work-dir", work, "--ready-file", ready, "--drain-time", "0s", "--cp-retry-backoff", "100ms")
	var r struct{ Admin string }
	p.ReadyJSON(e.t, ready, &r, 30*time.Second)
	e.agents[name] = p
	return p
}

// vipsFiles writes what the control plane serves mesh default's agents as files kuma-dp vips reads:
// each resource's document with the store's creation time (the agents order collisions by
// it), dataplane name's in a file of its own. It returns the dataplane file and the dir.
func (e *cpEnv) vipsFiles(name string) (dataplaneFile, dir string) {
	e.t.Helper()
	ctx := context.Background()
	dir = filepath.Join(e.t.TempDir(), "policies")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for _, kind := range cplink.Kinds { // what the control plane serves agents
		typ := api.TypeOf(kind)
		if typ == "" {
			continue // derived by the control plane (zones), not in the API
		}
		items, err := e.api.List(ctx, "default", typ)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, it := range items {
			// as the control plane serves it: decoded (the document is stored as its user
			// wrote it, in either form), with the store's creation time, encoded
			rs, err := mesh.Decode(it.Name, it.Document())
			if err != nil || len(rs) != 1 {
				e.t.Fatalf("%s %s: %v", typ, it.Name, err)
			}
			rs[0].GetMeta().SetCreationTime(it.CreationTime)
			b, err := cplink.EncodeResource(rs[0])
			if err != nil {
				e.t.Fatal(err)
			}
			// a file per kind and stored name (a route's is name.namespace: the control
			// plane serves routes of one name in two namespaces apart)
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.yaml", typ, it.Name))
			if typ == "dataplanes" && it.Name == name {
				path = filepath.Join(e.t.TempDir(), "dataplane.yaml")
				dataplaneFile = path
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	if dataplaneFile == "" {
		e.t.Fatalf("dataplane %s is not in the API", name)
	}
	return dataplaneFile, dir
}
