package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/server"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// serveCmd is `serve`: its flags, bound onto cp/server's Config, which runs it.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	var c server.Config
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&c.ResourcesDir, "resources-dir", "", "directory of resources (dataplanes and policies of every mesh), read recursively and watched (--store dir)")
	bindStoreFlags(fs, &c.Store)
	fs.StringVar(&c.Address, "address", "127.0.0.1:5678", "address to serve agents on (port 0: any free port, see --ready-file)")
	fs.StringVar(&c.CertFile, "tls-cert-file", "", "server certificate (PEM); without it the link is plain text")
	fs.StringVar(&c.KeyFile, "tls-key-file", "", "server key (PEM)")
	fs.StringVar(&c.TokenKeyFile, "token-key-file", "", "key that signs dataplane tokens; without it tokens are not checked")
	fs.DurationVar(&c.Poll, "poll-interval", 200*time.Millisecond, "how often the directory is checked for changes")
	fs.BoolVar(&c.SkipValidation, "skip-validation", false, "serve documents that fail validation as written, for agents to judge (NACK tests, agents newer than this control plane)")
	fs.StringVar(&c.MetricsAddress, "metrics-address", "127.0.0.1:5680", "diagnostics endpoint: /metrics, /ready, /healthz (empty: off)")
	fs.BoolVar(&c.MetricsPprof, "metrics-pprof", false, "serve Go's profiles under /debug/pprof/ on the diagnostics endpoint (memory and CPU investigations)")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", 10*time.Second, "a connection that has not finished its TLS and HTTP/2 handshake by then is closed")
	fs.DurationVar(&c.AgentKeepalive, "agent-keepalive", fanout.DefaultAgentKeepalive, "an agent's connection silent this long is pinged; an agent not heard from for twice this no longer counts as connected, so a frozen or cut-off gateway replica leaves its router's DNS within about twice this (at least 1s); its connection is closed once the ping has waited 20s")
	fs.DurationVar(&c.MaxConnAge, "max-connection-age", 30*time.Minute, "an agent's connection is closed after this long (with jitter) and it reconnects, to spread agents over the replicas after a scale-out (0: never)")
	fs.IntVar(&c.MaxConns, "max-connections", 0, "agents' connections held at once; more are closed at once (default: 16384, or what the open-files limit leaves after 256 and the API's and metrics' limits)")
	fs.IntVar(&c.MaxConnsPerIP, "max-connections-per-ip", 1024, "agents' connections held at once from one client IP (0: no limit)")
	bindHTTPFlags(fs, &c)
	fs.StringVar(&c.ReadyFile, "ready-file", "", "write {\"address\": ..., \"metrics\": ...} here once serving")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if rc, done := parse("serve", fs, args, stdout, stderr); done {
		return rc
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "kuma-cp serve: --log-level %q: want debug, info, warn or error\n", *logLevel)
		return exitUsage
	}
	if err := c.Check(); err != nil {
		fmt.Fprintf(stderr, "kuma-cp serve: %v\nRun 'kuma-cp serve --help' for the flags.\n", err)
		return exitUsage
	}
	// --http-*-timeout (bound to the metrics port's) are the API port's too
	c.Store.APIHTTP.HeaderTimeout, c.Store.APIHTTP.IdleTimeout = c.Metrics.HeaderTimeout, c.Metrics.IdleTimeout
	c.ShareDescriptors(fs.Changed)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := server.Serve(c, log); err != nil {
		log.Error("kuma-cp stopped", "error", err)
		return exitFail
	}
	return exitOK
}

// bindStoreFlags binds the store's flags: --store, etcd's connection, the API, leader
// election, route scheduling and the shards' DNS.
func bindStoreFlags(fs *pflag.FlagSet, c *server.StoreConfig) {
	host, _ := os.Hostname()
	fs.StringVar(&c.Kind, "store", "dir", "where resources live: dir (--resources-dir, the default) or etcd (--etcd-endpoints; replicas, the write API)")
	c.Etcd.Bind(fs, "etcd client URLs, comma-separated (--store etcd)")
	fs.StringVar(&c.APIAddress, "api-address", "127.0.0.1:5681", "the API (Kuma's REST shape) and the web GUI at /gui, loopback unless told otherwise; with --store dir they are served when --admin-token-file is given")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", "", "file holding the admin token that writes through the API need (required with --store etcd; with --store dir it turns the API on)")
	fs.StringVar(&c.ReplicaID, "replica-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this replica's name in leader election")
	fs.DurationVar(&c.LeaseTTL, "leader-lease-ttl", cpstore.DefaultLeaseTTL, "a leader that stops renewing for this long is replaced")
	fs.StringVar(&c.RouteStrategy, "route-strategy", "round-robin", "how the leader schedules routes onto routers: round-robin or least-routes")
	fs.StringVar(&c.DNS.Address, "dns-address", "", "serve authoritative DNS for router shards and users' domains here, UDP and TCP (e.g. 127.0.0.1:5653; --store etcd)")
	fs.StringSliceVar(&c.DNS.UserZones, "dns-user-zone", nil, "a users' domain this server is authoritative for (repeatable)")
	fs.StringSliceVar(&c.DNS.Nameservers, "dns-nameserver", nil, "NS of every zone, NAME or NAME=IP (glue when inside the zone; repeatable)")
	fs.StringSliceVar(&c.DNS.TransferFrom, "dns-transfer-from", nil, "networks allowed zone transfers (AXFR/IXFR) without TSIG, e.g. 10.0.0.0/8 (repeatable)")
	fs.StringSliceVar(&c.DNS.Secondaries, "dns-secondary", nil, "a secondary (IP:port) told of every change by NOTIFY (repeatable)")
	fs.StringToStringVar(&c.DNS.TSIG, "dns-tsig-key", nil, "TSIG key name=base64-secret (HMAC-SHA256) allowed to transfer zones (repeatable)")
	fs.StringVar(&c.DNS.NotifyKey, "dns-notify-key", "", "the TSIG key (of --dns-tsig-key) that signs NOTIFY")
}

// bindHTTPFlags binds the limits of the HTTP ports (the API, the diagnostics endpoint).
func bindHTTPFlags(fs *pflag.FlagSet, c *server.Config) {
	c.Store.APIHTTP, c.Metrics = connlimit.DefaultAPI, connlimit.DefaultMetrics
	fs.IntVar(&c.Store.APIHTTP.Total, "api-max-connections", c.Store.APIHTTP.Total, "API connections held at once; more are closed at once (0: no limit)")
	fs.IntVar(&c.Store.APIHTTP.PerIP, "api-max-connections-per-ip", c.Store.APIHTTP.PerIP, "API connections held at once from one client IP (0: no limit)")
	fs.IntVar(&c.Metrics.Total, "metrics-max-connections", c.Metrics.Total, "diagnostics (--metrics-address) connections held at once (0: no limit)")
	fs.IntVar(&c.Metrics.PerIP, "metrics-max-connections-per-ip", c.Metrics.PerIP, "diagnostics connections held at once from one client IP (0: no limit)")
	fs.DurationVar(&c.Metrics.HeaderTimeout, "http-header-timeout", c.Metrics.HeaderTimeout, "the API's and diagnostics' connections: a request's line and headers not received by then close it")
	fs.DurationVar(&c.Metrics.IdleTimeout, "http-idle-timeout", c.Metrics.IdleTimeout, "the API's and diagnostics' keep-alive connections without a new request for this long are closed")
}
