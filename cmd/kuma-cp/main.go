// Command kuma-cp is a small reference control plane for kuma-dp agents: it serves a
// watched directory (or etcd) of resources over incremental ADS (delta xDS, its own server in
// cp/fanout) to many agents, checks their tokens, validates with the agent's own code
// (package mesh) and sends each agent only its mesh. See docs/cplink.md.
//
//	kuma-cp certs --out-dir DIR            # CA, server certificate, token key (demo, tests)
//	kuma-cp token --token-key-file K --name N --mesh M
//	kuma-cp serve --resources-dir DIR --tls-cert-file C --tls-key-file K --token-key-file T
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/diag"
	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/gui"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
)

const (
	exitOK    = cli.ExitOK
	exitFail  = cli.ExitFail
	exitUsage = cli.ExitUsage
)

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }

// apiHandler is the API and, at /gui, the GUI reading it.
func apiHandler(srv *api.Server, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	api := srv.Handler()
	g := gui.New(api, buildinfo.Version, log.With("part", "gui")).Handler() // make build-cp stamps it
	mux.Handle(gui.Prefix, g)
	mux.Handle(gui.Prefix+"/", g)
	mux.Handle("/", api)
	return mux
}

const usageText = `kuma-cp: a reference control plane for kuma-dp agents

Usage:
  kuma-cp <command> [flags]

Commands:
  serve   serve resources to agents (delta ADS over gRPC): a directory, or etcd (--store etcd)
  apply   create or update the resources of files (-f FILE|DIR|-) through the API (serve --admin-token-file)
  get     list or show resources: get TYPE [NAME] [-o table|yaml|json]
  delete  delete a resource: delete TYPE NAME
  zones   print the router shards' DNS zones from the store (-o zone|json), for nsd, knot or BIND
  describe  a route, a router or a MeshExternalService in full: describe route NAME -n NAMESPACE | router NAME | meshexternalservice NAME
  inspect   inspect dataplanes: each dataplane's tags and whether its agent is connected now (Online)
  router install NAME  what runs a router's replicas: Kubernetes objects, systemd units, their Dataplanes
  token   issue a dataplane token
  certs   write a self-signed CA, a server certificate and a token key (demo, tests)
  config  the API commands' control planes, as kumactl's: config control-planes add|switch|list|remove
  version print the version

Example (two terminals; see docs/cplink.md):
  kuma-cp certs --out-dir /tmp/cp
  kuma-cp serve --resources-dir testdata/mesh/policies --address 127.0.0.1:5678 \
    --tls-cert-file /tmp/cp/tls.crt --tls-key-file /tmp/cp/tls.key --token-key-file /tmp/cp/token.key
  kuma-cp token --token-key-file /tmp/cp/token.key --name web-1 --mesh default > /tmp/cp/web-1.token
  kuma-dp run --cp-address grpcs://127.0.0.1:5678 --ca-cert-file /tmp/cp/ca.crt \
    --dataplane-token-file /tmp/cp/web-1.token --dataplane-file testdata/mesh/dataplane.yaml --envoy=false
`

// commandExamples are the examples each command's --help ends with (the API commands' are
// cp/cli's), each run as written by a test on the bundled files.
var commandExamples = map[string]string{
	"router install": routerExample,
	"version": `Example:
  kuma-cp version
`,
	"certs": `Example:
  kuma-cp certs --out-dir /tmp/cp
`,
	"token": `Example (the token for the bundled dataplane, testdata/mesh/dataplane.yaml):
  kuma-cp token --token-key-file /tmp/cp/token.key --name web-1 --mesh default > /tmp/cp/web-1.token
`,
	"serve": `Examples (a directory, TLS and tokens from kuma-cp certs; then the same on etcd, with the write API):
  kuma-cp serve --resources-dir testdata/mesh/policies \
    --tls-cert-file /tmp/cp/tls.crt --tls-key-file /tmp/cp/tls.key --token-key-file /tmp/cp/token.key
  kuma-cp serve --store etcd --etcd-endpoints http://127.0.0.1:2379 --admin-token-file /tmp/cp/admin.token
`,
	"zones": `Example (the etcd of kuma-cp serve --store etcd, with testdata/routes/shard-a.yaml applied):
  kuma-cp zones --etcd-endpoints http://127.0.0.1:2379
  kuma-cp zones --etcd-endpoints http://127.0.0.1:2379 -o json
`,
}

// dispatch runs a command; what it printed and could not write (a full disk: a token
// written to a file, get's output) fails it, exit 1 - it exited 0.
func dispatch(args []string, stdout, stderr io.Writer) int {
	out := &api.ErrWriter{W: stdout}
	rc := dispatchTo(args, out, stderr)
	if out.Err != nil && rc != exitFail {
		name := "kuma-cp"
		if len(args) > 0 {
			name += " " + args[0]
		}
		fmt.Fprintf(stderr, "%s: writing the output: %v\n", name, out.Err)
		return exitFail
	}
	return rc
}

func dispatchTo(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	case "token":
		return tokenCmd(args[1:], stdout, stderr)
	case "apply", "get", "delete", "describe", "inspect":
		return cli.Client(args[0], args[1:], stdout, stderr, os.Getenv)
	case "zones":
		return zonesCmd(args[1:], stdout, stderr)
	case "config":
		return cli.ConfigCommand(args[1:], stdout, stderr, os.Getenv)
	case "certs":
		return certsCmd(args[1:], stdout, stderr)
	case "router":
		return routerCmd(args[1:], stdout, stderr)
	case "version", "--version":
		fs := pflag.NewFlagSet("version", pflag.ContinueOnError)
		if rc, done := parse("version", fs, args[1:], stdout, stderr); done {
			return rc
		}
		fmt.Fprintln(stdout, buildinfo.String("kuma-cp"))
		return exitOK
	}
	fmt.Fprintf(stderr, "kuma-cp: unknown command %q\n\n%s", args[0], usageText)
	return exitUsage
}

// parse parses a command's flags (cli.Parse) with its example from commandExamples.
func parse(name string, fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	return cli.Parse(name, fs, args, false, commandExamples[name], stdout, stderr)
}

func certsCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("certs", pflag.ContinueOnError)
	dir := fs.String("out-dir", "", "directory to write ca.crt, tls.crt, tls.key and token.key into (required)")
	hosts := fs.StringSlice("host", []string{"localhost", "127.0.0.1", "::1"}, "names and IPs the server certificate is for")
	if rc, done := parse("certs", fs, args, stdout, stderr); done {
		return rc
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "kuma-cp certs: --out-dir is required")
		return exitUsage
	}
	if err := certs.Write(*dir, *hosts); err != nil {
		fmt.Fprintf(stderr, "kuma-cp certs: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "wrote %s/{%s,%s,%s,%s}\n", *dir, certs.CACertFile, certs.TLSCertFile, certs.TLSKeyFile, certs.TokenKeyFile)
	return exitOK
}

func tokenCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("token", pflag.ContinueOnError)
	keyFile := fs.String("token-key-file", "", "the control plane's token key (required)")
	name := fs.String("name", "", "the dataplane's name (required)")
	meshName := fs.String("mesh", "default", "the dataplane's mesh")
	validFor := fs.Duration("valid-for", 24*time.Hour, "how long the token is accepted (0: no expiry); rotate the key to revoke every token")
	if rc, done := parse("token", fs, args, stdout, stderr); done {
		return rc
	}
	var missing []string
	for flag, v := range map[string]string{"--token-key-file": *keyFile, "--name": *name, "--mesh": *meshName} {
		if v == "" {
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		fmt.Fprintf(stderr, "kuma-cp token: %s required (missing: %s)\nRun 'kuma-cp token --help' for the flags.\n",
			plural(len(missing), "is", "are"), strings.Join(missing, ", "))
		return exitUsage
	}
	key, err := token.ReadKey(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp token: %v\n", err)
		return exitFail
	}
	id := token.Identity{Name: *name, Mesh: *meshName}
	if *validFor > 0 {
		id.Expires = time.Now().Add(*validFor).Unix()
	}
	fmt.Fprintln(stdout, token.Issue(key, id))
	return exitOK
}

type serveConfig struct {
	dir, address, certFile, keyFile, tokenKeyFile, readyFile, logLevel string
	metricsAddress                                                     string
	metricsPprof                                                       bool
	metrics                                                            connlimit.HTTPConfig // and c.etcd.apiHTTP: the HTTP ports
	etcd                                                               etcdConfig
	poll, handshakeTimeout, maxConnAge, agentKeepalive                 time.Duration
	maxConns, maxConnsPerIP                                            int
	skipValidation                                                     bool
}

func serveCmd(args []string, stdout, stderr io.Writer) int {
	var c serveConfig
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&c.dir, "resources-dir", "", "directory of resources (dataplanes and policies of every mesh), read recursively and watched (--store dir)")
	c.etcd.bind(fs)
	fs.StringVar(&c.address, "address", "127.0.0.1:5678", "address to serve agents on (port 0: any free port, see --ready-file)")
	fs.StringVar(&c.certFile, "tls-cert-file", "", "server certificate (PEM); without it the link is plain text")
	fs.StringVar(&c.keyFile, "tls-key-file", "", "server key (PEM)")
	fs.StringVar(&c.tokenKeyFile, "token-key-file", "", "key that signs dataplane tokens; without it tokens are not checked")
	fs.DurationVar(&c.poll, "poll-interval", 200*time.Millisecond, "how often the directory is checked for changes")
	fs.BoolVar(&c.skipValidation, "skip-validation", false, "serve documents that fail validation as written, for agents to judge (NACK tests, agents newer than this control plane)")
	fs.StringVar(&c.metricsAddress, "metrics-address", "127.0.0.1:5680", "diagnostics endpoint: /metrics, /ready, /healthz (empty: off)")
	fs.BoolVar(&c.metricsPprof, "metrics-pprof", false, "serve Go's profiles under /debug/pprof/ on the diagnostics endpoint (memory and CPU investigations)")
	fs.DurationVar(&c.handshakeTimeout, "handshake-timeout", 10*time.Second, "a connection that has not finished its TLS and HTTP/2 handshake by then is closed")
	fs.DurationVar(&c.agentKeepalive, "agent-keepalive", fanout.DefaultAgentKeepalive, "an agent's connection silent this long is pinged, and closed when the ping is not answered within as long again: a frozen or cut-off gateway replica leaves its router's DNS within twice this (at least 1s)")
	fs.DurationVar(&c.maxConnAge, "max-connection-age", 30*time.Minute, "an agent's connection is closed after this long (with jitter) and it reconnects, to spread agents over the replicas after a scale-out (0: never)")
	fs.IntVar(&c.maxConns, "max-connections", 0, "agents' connections held at once; more are closed at once (default: 16384, or what the open-files limit leaves after 256 and the API's and metrics' limits)")
	fs.IntVar(&c.maxConnsPerIP, "max-connections-per-ip", 1024, "agents' connections held at once from one client IP (0: no limit)")
	bindHTTPFlags(fs, &c)
	fs.StringVar(&c.readyFile, "ready-file", "", "write {\"address\": ..., \"metrics\": ...} here once serving")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	if rc, done := parse("serve", fs, args, stdout, stderr); done {
		return rc
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(stderr, "kuma-cp serve: --log-level %q: want debug, info, warn or error\n", c.logLevel)
		return exitUsage
	}
	if err := c.check(); err != nil {
		fmt.Fprintf(stderr, "kuma-cp serve: %v\nRun 'kuma-cp serve --help' for the flags.\n", err)
		return exitUsage
	}
	// --http-*-timeout (bound to the metrics port's) are the API port's too
	c.etcd.apiHTTP.HeaderTimeout, c.etcd.apiHTTP.IdleTimeout = c.metrics.HeaderTimeout, c.metrics.IdleTimeout
	shareDescriptors(&c, fs.Changed)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(c, log); err != nil {
		log.Error("kuma-cp stopped", "error", err)
		return exitFail
	}
	return exitOK
}

// check refuses flag values that cannot work (usage errors: exit 2, like every command).
func (c serveConfig) check() error {
	if err := c.etcd.apiHTTP.Check("--api-"); err != nil {
		return err
	}
	if err := c.metrics.Check("--metrics-"); err != nil {
		return err
	}
	if c.maxConns < 0 || c.maxConnsPerIP < 0 {
		return fmt.Errorf("--max-connections %d, --max-connections-per-ip %d: want 0 or more", c.maxConns, c.maxConnsPerIP)
	}
	if c.etcd.store != "dir" {
		return c.etcd.check()
	}
	if c.dir == "" {
		return errors.New("--resources-dir is required")
	}
	if fi, err := os.Stat(c.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--resources-dir %q: not a readable directory", c.dir)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func serve(c serveConfig, log *slog.Logger) error {
	if err := c.check(); err != nil {
		return err
	}
	var key []byte
	if c.tokenKeyFile != "" {
		k, err := token.ReadKey(c.tokenKeyFile)
		if err != nil {
			return err
		}
		key = k
	} else {
		log.Warn("no --token-key-file: any agent is served, tokens are not checked")
	}
	var creds credentials.TransportCredentials
	if c.certFile != "" || c.keyFile != "" {
		tc, err := credentials.NewServerTLSFromFile(c.certFile, c.keyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert-file %q / --tls-key-file %q: %w", c.certFile, c.keyFile, err)
		}
		creds = tc
	} else {
		log.Warn("no --tls-cert-file: the link is plain text (agents use grpc://)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cp := fanout.New(key, log)
	var storeParts *etcdParts
	var apiPort *connlimit.HTTP
	if c.etcd.store == "etcd" {
		p, err := c.etcd.start(ctx, cp, log)
		if err != nil {
			return err
		}
		storeParts = p
	} else {
		st := dirstore.New(c.dir, !c.skipValidation, log)
		sv, _ := st.Scan()
		cp.Apply(sv)
		log.Info("resources loaded", "dir", c.dir, "resources", sv.Count(), "meshes", sv.Meshes())
		go st.Watch(ctx, cp, c.poll)
		if c.etcd.adminTokenFile != "" {
			port, err := serveDirAPI(ctx, c, cp, log)
			if err != nil {
				return err
			}
			apiPort = port
		}
	}

	raw, err := net.Listen("tcp", c.address)
	if err != nil {
		return fmt.Errorf("--address %q: %w", c.address, err)
	}
	ln := connlimit.Wrap(raw, connlimit.Limits{Total: c.maxConns, PerIP: c.maxConnsPerIP})
	cp.HandshakeFails = &ln.Stats.HandshakeFails
	maxAge := c.maxConnAge
	if maxAge <= 0 {
		maxAge = time.Duration(1<<63 - 1) // gRPC's "infinity"
	}
	cp.AgentKeepalive = c.agentKeepalive
	gs := cp.GRPCServer(creds, c.handshakeTimeout, maxAge)
	ready := map[string]string{"address": ln.Addr().String()}
	if storeParts != nil {
		apiPort = storeParts.api
	}
	if apiPort != nil {
		ready["api"] = apiPort.Addr().String()
	}
	if storeParts != nil {
		if storeParts.dnsAddr != "" {
			ready["dns"] = storeParts.dnsAddr
		}
	}
	if c.metricsAddress != "" {
		reg := prometheus.NewRegistry()
		// the process's CPU, memory and goroutines, as kuma-dp exports them (the dashboards'
		// panels, deploy/grafana)
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg.MustRegister(ln.Collectors("kuma_cp")...)
		reg.MustRegister(buildinfo.Collector("kuma_cp"))
		reg.MustRegister(cp.Collector())
		if apiPort != nil {
			reg.MustRegister(apiPort.Collectors("kuma_cp_api")...)
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kuma_cp_agents_connected", Help: "Agents with an open stream."},
			func() float64 { return float64(cp.Connected()) }))
		readyFn := func() error { return nil }
		if storeParts != nil {
			storeParts.register(reg)
			readyFn = storeParts.ready
		}
		d, err := diag.New(c.metricsAddress, c.metrics, reg, readyFn, c.metricsPprof)
		if err != nil {
			return err
		}
		go d.Run(ctx)
		ready["metrics"] = d.Addr().String()
	}
	log.Info("kuma-cp serving", "address", ln.Addr().String(), "tls", creds != nil, "tokens", key != nil,
		"metrics", ready["metrics"], "max_connections", c.maxConns, "max_connections_per_ip", c.maxConnsPerIP,
		"api_max_connections", c.etcd.apiHTTP.Total, "metrics_max_connections", c.metrics.Total)
	if c.readyFile != "" {
		b, _ := json.Marshal(ready)
		if err := os.WriteFile(c.readyFile, b, 0o644); err != nil {
			return fmt.Errorf("--ready-file %q: %w", c.readyFile, err)
		}
	}
	return cp.Serve(ctx, gs, ln)
}

// serveDirAPI serves the API on the resources directory (--store dir with an admin token):
// writes land in the directory's files, which the directory source serves at its next poll.
func serveDirAPI(ctx context.Context, c serveConfig, cp *fanout.ControlPlane, log *slog.Logger) (*connlimit.HTTP, error) {
	tok, err := os.ReadFile(c.etcd.adminTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file %q: %w", c.etcd.adminTokenFile, err)
	}
	st, err := dirstore.NewStore(c.dir)
	if err != nil {
		return nil, fmt.Errorf("--resources-dir: %w", err)
	}
	srv := &api.Server{Store: st, AdminToken: strings.TrimSpace(string(tok)), Status: func() any {
		_, _, rev, _ := st.List(context.Background(), "", "", "", 1)
		return map[string]any{"store": "dir", "dir": c.dir, "storeRevision": rev}
	}, Agents: func() []api.Agent { return api.MergeAgents(cp.AgentNames(), "", nil) }}
	port, err := connlimit.ListenHTTP(c.etcd.apiAddress, c.etcd.apiHTTP, apiHandler(srv, log))
	if err != nil {
		return nil, fmt.Errorf("--api-address %q: %w", c.etcd.apiAddress, err)
	}
	port.Server.RegisterOnShutdown(srv.CloseEvents)
	go port.Serve(ctx)
	log.Info("API serving the resources directory", "api", port.Addr().String(), "gui", "http://"+port.Addr().String()+gui.Prefix+"/", "dir", c.dir)
	return port, nil
}

// bindHTTPFlags binds the limits of the HTTP ports (the API, the diagnostics endpoint).
func bindHTTPFlags(fs *pflag.FlagSet, c *serveConfig) {
	c.etcd.apiHTTP, c.metrics = connlimit.DefaultAPI, connlimit.DefaultMetrics
	fs.IntVar(&c.etcd.apiHTTP.Total, "api-max-connections", c.etcd.apiHTTP.Total, "API connections held at once; more are closed at once (0: no limit)")
	fs.IntVar(&c.etcd.apiHTTP.PerIP, "api-max-connections-per-ip", c.etcd.apiHTTP.PerIP, "API connections held at once from one client IP (0: no limit)")
	fs.IntVar(&c.metrics.Total, "metrics-max-connections", c.metrics.Total, "diagnostics (--metrics-address) connections held at once (0: no limit)")
	fs.IntVar(&c.metrics.PerIP, "metrics-max-connections-per-ip", c.metrics.PerIP, "diagnostics connections held at once from one client IP (0: no limit)")
	fs.DurationVar(&c.metrics.HeaderTimeout, "http-header-timeout", c.metrics.HeaderTimeout, "the API's and diagnostics' connections: a request's line and headers not received by then close it")
	fs.DurationVar(&c.metrics.IdleTimeout, "http-idle-timeout", c.metrics.IdleTimeout, "the API's and diagnostics' keep-alive connections without a new request for this long are closed")
}

// shareDescriptors sets the connection limits not given from the open-files limit
// (connlimit.Share): a flood of the API or the metrics port never leaves the agents' port
// without descriptors.
func shareDescriptors(c *serveConfig, given func(string) bool) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim.Cur = 1 << 20
	}
	connlimit.Share(lim.Cur, &c.maxConns, &c.etcd.apiHTTP.Limits, &c.metrics.Limits, given)
}
