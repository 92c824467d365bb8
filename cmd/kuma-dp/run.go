package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/agent"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
	"github.com/kumadp/kuma-dp/internal/settings"
)

// processStart approximates the process's start for the startup time logged when ready.
var processStart = time.Now()

func init() {
	register(command{name: "run", summary: "run the dataplane agent (DNS, xDS, Envoy) from files or a control plane", run: runCmd})
}

// runSettings is every setting of run, each named once: its flag (Kuma's kuma-dp name where
// one exists), environment variable and --config file field. Precedence: defaults < --config
// file < environment < flags.
var runSettings = &settings.Table[agent.Config]{
	ConfigUsage: "YAML file with any of the settings (see docs/run.md); flags and KUMA_* variables override it",
	Scalars:     agent.ConfigScalars,
	Types:       agent.ConfigTypes,
	Settings: []settings.Setting[agent.Config]{
		{Flag: "name", Env: "KUMA_DATAPLANE_NAME", Field: "dataplane.name",
			Usage: "dataplane name; when set, must match the dataplane file"},
		{Flag: "mesh", Env: "KUMA_DATAPLANE_MESH", Field: "dataplane.mesh",
			Usage: "mesh name; when set, must match the dataplane file"},
		{Flag: "drain-time", Env: "KUMA_DATAPLANE_DRAIN_TIME", Field: "dataplane.drainTime",
			Usage: "how long Envoy drains (readiness 503, DNS answering) after SIGTERM"},
		{Flag: "dataplane-file", Env: "KUMA_DATAPLANE_RUNTIME_RESOURCE_PATH", Field: "dataplaneRuntime.resourcePath",
			Usage: "this dataplane's resource (YAML or JSON); required"},
		{Flag: "dataplane-var", Env: "KUMA_DATAPLANE_RUNTIME_RESOURCE_VARS", Field: "dataplaneRuntime.resourceVars",
			Usage: "value of a {{ name }} placeholder of the dataplane file, name=value (repeatable), e.g. address=$(POD_IP)"},
		{Flag: "policies-dir", Env: "KUMA_DATAPLANE_RUNTIME_POLICIES_DIR", Field: "dataplaneRuntime.policiesDir",
			Usage: "directory of policies and other dataplanes, read recursively and watched"},
		{Flag: "watch", Env: "KUMA_DATAPLANE_RUNTIME_WATCH", Field: "dataplaneRuntime.watch",
			Usage: "how changes are seen: auto (inotify, else polling), inotify or poll"},
		{Flag: "max-file-size-mib", Env: "KUMA_DATAPLANE_RUNTIME_MAX_FILE_SIZE_MIB", Field: "dataplaneRuntime.maxFileSizeMiB",
			Usage: "refuse a resource file larger than this many MiB (served at its last good version); 0: no limit"},
		{Flag: "max-total-size-mib", Env: "KUMA_DATAPLANE_RUNTIME_MAX_TOTAL_SIZE_MIB", Field: "dataplaneRuntime.maxTotalSizeMiB",
			Usage: "refuse a model whose files are larger than this many MiB in all; 0: no limit"},
		{Flag: "cp-address", Env: "KUMA_CONTROL_PLANE_URL", Field: "controlPlane.url",
			Usage: "take the model from this control plane (grpcs://host:port, delta xDS; several replicas comma-separated, tried in turn) instead of --policies-dir; see docs/cplink.md"},
		{Flag: "ca-cert-file", Env: "KUMA_CONTROL_PLANE_CA_CERT_FILE", Field: "controlPlane.caCertFile",
			Usage: "CA (PEM) that signed the control plane's certificate (default: the system's roots)"},
		{Flag: "dataplane-token-file", Env: "KUMA_DATAPLANE_RUNTIME_TOKEN_PATH", Field: "dataplaneRuntime.tokenPath",
			Usage: "this dataplane's token for the control plane (kuma-cp token)"},
		{Flag: "cp-retry-backoff", Env: "KUMA_CONTROL_PLANE_RETRY_BACKOFF", Field: "controlPlane.retryBackoff",
			Usage: "first wait after a failed connection to the control plane; doubles (with jitter) up to 30s"},
		{Flag: "cp-keepalive-interval", Env: "KUMA_CONTROL_PLANE_KEEPALIVE_INTERVAL", Field: "controlPlane.keepaliveInterval",
			Usage: "how often the link checks that the control plane answers; no answer: reconnect"},
		{Flag: "work-dir", Env: "KUMA_DATAPLANE_RUNTIME_WORK_DIR", Field: "dataplaneRuntime.workDir",
			Usage: "directory for the VIP state file, Envoy bootstrap and sockets (default: a directory per dataplane under $TMPDIR)"},
		{Flag: "envoy", Env: "KUMA_DATAPLANE_RUNTIME_ENVOY", Field: "dataplaneRuntime.envoy",
			Usage: "run Envoy (found at --binary-path, in PATH or beside kuma-dp); --envoy=false serves DNS alone"},
		{Flag: "binary-path", Env: "KUMA_DATAPLANE_RUNTIME_BINARY_PATH", Field: "dataplaneRuntime.binaryPath",
			Usage: "path of the envoy binary"},
		{Flag: "ready-file", Env: "KUMA_DATAPLANE_RUNTIME_READY_FILE", Field: "dataplaneRuntime.readyFile",
			Usage: "write the bound addresses (admin, DNS) as JSON to this file once ready"},
		{Flag: "dns-address", Env: "KUMA_DNS_ADDRESS", Field: "dns.addresses",
			Usage: "IPs the resolver listens on (default 127.0.0.1 and ::1 where available)"},
		{Flag: "dns-proxy-port", Env: "KUMA_DNS_PROXY_PORT", Field: "dns.proxyPort",
			Usage: "resolver port, UDP and TCP (0: any free port)"},
		{Flag: "dns-upstream", Env: "KUMA_DNS_UPSTREAM", Field: "dns.upstreams",
			Usage: "upstream resolvers IP[:port] (default: those of --dns-resolv-conf)"},
		{Flag: "dns-ttl", Env: "KUMA_DNS_TTL", Field: "dns.ttl",
			Usage: "TTL of VIP answers"},
		{Flag: "dns-resolv-conf", Env: "KUMA_DNS_RESOLV_CONF", Field: "dns.resolvConf",
			Usage: "resolv.conf giving upstreams and search domains"},
		{Flag: "dns-corefile-template", Env: "KUMA_DNS_COREFILE_TEMPLATE", Field: "dns.corefileTemplate",
			Usage: "your own Corefile template for the resolver"},
		{Flag: "admin-address", Env: "KUMA_ADMIN_ADDRESS", Field: "admin.address",
			Usage: "admin HTTP endpoint (/ready, /vips, /metrics, /config_dump), loopback only"},
		{Flag: "readiness-address", Env: "KUMA_READINESS_ADDRESS", Field: "admin.readinessAddress",
			Usage: "also serve GET /ready alone here, e.g. :9901 for a kubelet probe (off by default)"},
		{Flag: "admin-pprof", Env: "KUMA_ADMIN_PPROF", Field: "admin.pprof",
			Usage: "serve Go's profiles under /debug/pprof/ on the admin endpoint (memory and CPU investigations)"},
		{Flag: "log-level", Env: "KUMA_LOG_LEVEL", Field: "log.level",
			Usage: "debug, info, warn or error"},
		{Flag: "log-format", Env: "KUMA_LOG_FORMAT", Field: "log.format",
			Usage: "text or json"},
		{Flag: "transparent-proxy", Env: "KUMA_TRANSPARENT_PROXY", Field: "transparentProxy.enabled",
			Usage: "install the transparent proxy (iptables) at start (needs root / NET_ADMIN)"},
		{Flag: "transparent-proxy-uninstall", Env: "KUMA_TRANSPARENT_PROXY_UNINSTALL", Field: "transparentProxy.uninstallOnExit",
			Usage: "remove the transparent proxy's rules at exit"},
	},
}

const runExample = `Example (the bundled example mesh, DNS on 127.0.0.1:15053, no Envoy):
  kuma-dp run --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies --envoy=false
  dig @127.0.0.1 -p 15053 httpbin.mesh
  curl -s 127.0.0.1:9902/vips

Example (the model from a control plane, kuma-cp; see docs/cplink.md):
  kuma-dp run --cp-address grpcs://127.0.0.1:5678 --ca-cert-file /tmp/cp/ca.crt \
    --dataplane-token-file /tmp/cp/web-1.token --dataplane-file testdata/mesh/dataplane.yaml --envoy=false

Every flag also comes from an environment variable and from the --config file:
`

func runUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage:\n  kuma-dp run --dataplane-file DP.yaml --policies-dir DIR [flags]\n")
	fmt.Fprintf(w, "  kuma-dp run --cp-address URL --dataplane-token-file F (--dataplane-file DP.yaml | --name N --mesh M) [flags]\n\n")
	fmt.Fprintf(w, "Loads and validates the model, allocates this dataplane's VIPs, serves DNS for them\n")
	fmt.Fprintf(w, "(and xDS to Envoy when found), reloads on every file change or SIGHUP, drains on SIGTERM.\n\n")
	fmt.Fprintf(w, "Flags:\n%s\n%s", fs.FlagUsages(), runExample)
	runSettings.WriteSources(w)
}

// parseRunConfig builds the configuration from defaults, the --config file, KUMA_*
// variables and flags, in that order of precedence. It returns exitUsage and a message
// naming the flag, variable or field and the value on any bad input, or exitOK with help.
func parseRunConfig(args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) (agent.Config, int, bool) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SortFlags = false
	flags := runSettings.Define(fs, agent.Defaults())
	cmd := subcommand{name: "run", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) { runUsage(w, fs) }}
	if rc, done := cmd.parse(args); done {
		return agent.Config{}, rc, true
	}
	if fs.NArg() > 0 {
		return agent.Config{}, cmd.usageErr("unexpected argument %q (every setting is a flag)", fs.Arg(0)), true
	}
	cfg, err := flags.Load(agent.Defaults(), getenv)
	var fileErr *settings.FileError
	var valueErr *settings.ValueError
	switch {
	case errors.As(err, &fileErr):
		fmt.Fprintf(stderr, "kuma-dp run: --config %s:\n%s\n", fileErr.Path, indent(fileErr.Err.Error()))
		return agent.Config{}, exitUsage, true
	case errors.As(err, &valueErr) && valueErr.Env == "": // a flag's value: a usage error
		return agent.Config{}, cmd.usageErr("%v", valueErr), true
	case err != nil:
		fmt.Fprintf(stderr, "kuma-dp run: %v\n", err)
		return agent.Config{}, exitUsage, true
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "kuma-dp run: %s\n", describeConfigError(err))
		return agent.Config{}, exitUsage, true
	}
	return cfg, exitOK, false
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// describeConfigError names the flag, variable and file field of a bad value.
func describeConfigError(err error) string {
	var fe *agent.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	if o, ok := runSettings.ByField(fe.Field); ok {
		return fmt.Sprintf("--%s (%s, %s in --config): %s (value %q)", o.Flag, o.Env, o.Field, fe.Msg, fe.Value)
	}
	return fe.Error()
}

func runCmd(args []string, stdout, stderr io.Writer) int {
	cfg, code, done := parseRunConfig(args, os.LookupEnv, stdout, stderr)
	if done {
		return code
	}
	log, err := agent.NewLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-dp run: %v\n", err)
		return exitUsage
	}
	log.Info("kuma-dp starting", "pid", os.Getpid(), "version", buildinfo.Version, "dataplane_file", cfg.Runtime.DataplaneFile,
		"policies_dir", cfg.Runtime.PoliciesDir, "cp_address", cfg.ControlPlane.URL, "dies_with_go_run", agent.DieWithGoRun())
	if effective, err := json.Marshal(cfg); err == nil {
		log.Debug("effective configuration (defaults < --config < KUMA_* < flags)", "config", string(effective))
	}
	ctx := context.Background()
	parts, cleanup, err := agent.Build(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		return exitInvalid
	}
	startFailed := true // until it serves: a failed start removes the work dir it created
	defer func() { cleanup(startFailed) }()
	a, err := agent.New(cfg, parts, log, processStart)
	if err != nil {
		log.Error("cannot start", "error", err)
		return exitInvalid
	}
	if err := a.RunWithSignals(ctx); err != nil {
		var invalid *agent.InvalidModelError
		if errors.As(err, &invalid) {
			log.Error("not started: fix the files above and run again")
			return exitInvalid
		}
		startFailed = !a.EverReady()
		log.Error("stopped", "error", err)
		return exitInvalid
	}
	startFailed = false
	log.Info("stopped")
	return exitOK
}
