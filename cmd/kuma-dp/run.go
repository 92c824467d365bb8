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
)

// processStart approximates the process's start for the startup time logged when ready.
var processStart = time.Now()

func init() {
	register(command{name: "run", summary: "run the dataplane agent (DNS, xDS, Envoy) from files or a control plane", run: runCmd})
}

// option ties one setting's flag to its environment variable and config file field.
// Precedence: defaults < --config file < environment < flags.
type option struct {
	flag, env, field string
}

// options lists every setting; flag names follow Kuma's kuma-dp where one exists.
var options = []option{
	{"name", "KUMA_DATAPLANE_NAME", "dataplane.name"},
	{"mesh", "KUMA_DATAPLANE_MESH", "dataplane.mesh"},
	{"drain-time", "KUMA_DATAPLANE_DRAIN_TIME", "dataplane.drainTime"},
	{"dataplane-file", "KUMA_DATAPLANE_RUNTIME_RESOURCE_PATH", "dataplaneRuntime.resourcePath"},
	{"dataplane-var", "KUMA_DATAPLANE_RUNTIME_RESOURCE_VARS", "dataplaneRuntime.resourceVars"},
	{"policies-dir", "KUMA_DATAPLANE_RUNTIME_POLICIES_DIR", "dataplaneRuntime.policiesDir"},
	{"watch", "KUMA_DATAPLANE_RUNTIME_WATCH", "dataplaneRuntime.watch"},
	{"max-file-size-mib", "KUMA_DATAPLANE_RUNTIME_MAX_FILE_SIZE_MIB", "dataplaneRuntime.maxFileSizeMiB"},
	{"max-total-size-mib", "KUMA_DATAPLANE_RUNTIME_MAX_TOTAL_SIZE_MIB", "dataplaneRuntime.maxTotalSizeMiB"},
	{"cp-address", "KUMA_CONTROL_PLANE_URL", "controlPlane.url"},
	{"ca-cert-file", "KUMA_CONTROL_PLANE_CA_CERT_FILE", "controlPlane.caCertFile"},
	{"dataplane-token-file", "KUMA_DATAPLANE_RUNTIME_TOKEN_PATH", "dataplaneRuntime.tokenPath"},
	{"cp-retry-backoff", "KUMA_CONTROL_PLANE_RETRY_BACKOFF", "controlPlane.retryBackoff"},
	{"cp-keepalive-interval", "KUMA_CONTROL_PLANE_KEEPALIVE_INTERVAL", "controlPlane.keepaliveInterval"},
	{"work-dir", "KUMA_DATAPLANE_RUNTIME_WORK_DIR", "dataplaneRuntime.workDir"},
	{"envoy", "KUMA_DATAPLANE_RUNTIME_ENVOY", "dataplaneRuntime.envoy"},
	{"binary-path", "KUMA_DATAPLANE_RUNTIME_BINARY_PATH", "dataplaneRuntime.binaryPath"},
	{"ready-file", "KUMA_DATAPLANE_RUNTIME_READY_FILE", "dataplaneRuntime.readyFile"},
	{"dns-address", "KUMA_DNS_ADDRESS", "dns.addresses"},
	{"dns-proxy-port", "KUMA_DNS_PROXY_PORT", "dns.proxyPort"},
	{"dns-upstream", "KUMA_DNS_UPSTREAM", "dns.upstreams"},
	{"dns-ttl", "KUMA_DNS_TTL", "dns.ttl"},
	{"dns-resolv-conf", "KUMA_DNS_RESOLV_CONF", "dns.resolvConf"},
	{"dns-corefile-template", "KUMA_DNS_COREFILE_TEMPLATE", "dns.corefileTemplate"},
	{"admin-address", "KUMA_ADMIN_ADDRESS", "admin.address"},
	{"readiness-address", "KUMA_READINESS_ADDRESS", "admin.readinessAddress"},
	{"admin-pprof", "KUMA_ADMIN_PPROF", "admin.pprof"},
	{"log-level", "KUMA_LOG_LEVEL", "log.level"},
	{"log-format", "KUMA_LOG_FORMAT", "log.format"},
	{"transparent-proxy", "KUMA_TRANSPARENT_PROXY", "transparentProxy.enabled"},
	{"transparent-proxy-uninstall", "KUMA_TRANSPARENT_PROXY_UNINSTALL", "transparentProxy.uninstallOnExit"},
}

// bindFlags defines every flag on fs, bound to c's fields with c's current values as the
// defaults; so binding to a config already holding file and environment values makes the
// command line override them and nothing else.
func bindFlags(fs *pflag.FlagSet, c *agent.Config) *string {
	fs.StringVar(&c.Dataplane.Name, "name", c.Dataplane.Name, "dataplane name; when set, must match the dataplane file")
	fs.StringVar(&c.Dataplane.Mesh, "mesh", c.Dataplane.Mesh, "mesh name; when set, must match the dataplane file")
	fs.DurationVar((*time.Duration)(&c.Dataplane.DrainTime), "drain-time", time.Duration(c.Dataplane.DrainTime), "how long Envoy drains (readiness 503, DNS answering) after SIGTERM")
	fs.StringVar(&c.Runtime.DataplaneFile, "dataplane-file", c.Runtime.DataplaneFile, "this dataplane's resource (YAML or JSON); required")
	fs.StringToStringVar(&c.Runtime.ResourceVars, "dataplane-var", c.Runtime.ResourceVars, "value of a {{ name }} placeholder of the dataplane file, name=value (repeatable), e.g. address=$(POD_IP)")
	fs.StringVar(&c.Runtime.PoliciesDir, "policies-dir", c.Runtime.PoliciesDir, "directory of policies and other dataplanes, read recursively and watched")
	fs.StringVar(&c.Runtime.Watch, "watch", c.Runtime.Watch, "how changes are seen: auto (inotify, else polling), inotify or poll")
	fs.Int64Var(&c.Runtime.MaxFileSizeMiB, "max-file-size-mib", c.Runtime.MaxFileSizeMiB, "refuse a resource file larger than this many MiB (the last good model stays); 0: no limit")
	fs.Int64Var(&c.Runtime.MaxTotalSizeMiB, "max-total-size-mib", c.Runtime.MaxTotalSizeMiB, "refuse a model whose files are larger than this many MiB in all; 0: no limit")
	fs.StringVar(&c.ControlPlane.URL, "cp-address", c.ControlPlane.URL, "take the model from this control plane (grpcs://host:port, delta xDS; several replicas comma-separated, tried in turn) instead of --policies-dir; see docs/cplink.md")
	fs.StringVar(&c.ControlPlane.CACertFile, "ca-cert-file", c.ControlPlane.CACertFile, "CA (PEM) that signed the control plane's certificate (default: the system's roots)")
	fs.StringVar(&c.Runtime.TokenPath, "dataplane-token-file", c.Runtime.TokenPath, "this dataplane's token for the control plane (kuma-cp token)")
	fs.DurationVar((*time.Duration)(&c.ControlPlane.RetryBackoff), "cp-retry-backoff", time.Duration(c.ControlPlane.RetryBackoff), "first wait after a failed connection to the control plane; doubles (with jitter) up to 30s")
	fs.DurationVar((*time.Duration)(&c.ControlPlane.KeepaliveInterval), "cp-keepalive-interval", time.Duration(c.ControlPlane.KeepaliveInterval), "how often the link checks that the control plane answers; no answer: reconnect")
	fs.StringVar(&c.Runtime.WorkDir, "work-dir", c.Runtime.WorkDir, "directory for the VIP state file, Envoy bootstrap and sockets (default: a directory per dataplane under $TMPDIR)")
	fs.BoolVar(&c.Runtime.Envoy, "envoy", c.Runtime.Envoy, "run Envoy (found at --binary-path, in PATH or beside kuma-dp); --envoy=false serves DNS alone")
	fs.StringVar(&c.Runtime.BinaryPath, "binary-path", c.Runtime.BinaryPath, "path of the envoy binary")
	fs.StringVar(&c.Runtime.ReadyFile, "ready-file", c.Runtime.ReadyFile, "write the bound addresses (admin, DNS) as JSON to this file once ready")
	fs.StringSliceVar(&c.DNS.Addresses, "dns-address", c.DNS.Addresses, "IPs the resolver listens on (default 127.0.0.1 and ::1 where available)")
	fs.IntVar(&c.DNS.ProxyPort, "dns-proxy-port", c.DNS.ProxyPort, "resolver port, UDP and TCP (0: any free port)")
	fs.StringSliceVar(&c.DNS.Upstreams, "dns-upstream", c.DNS.Upstreams, "upstream resolvers IP[:port] (default: those of --dns-resolv-conf)")
	fs.DurationVar((*time.Duration)(&c.DNS.TTL), "dns-ttl", time.Duration(c.DNS.TTL), "TTL of VIP answers")
	fs.StringVar(&c.DNS.ResolvConf, "dns-resolv-conf", c.DNS.ResolvConf, "resolv.conf giving upstreams and search domains")
	fs.StringVar(&c.DNS.CorefileTemplate, "dns-corefile-template", c.DNS.CorefileTemplate, "your own Corefile template for the resolver")
	fs.StringVar(&c.Admin.Address, "admin-address", c.Admin.Address, "admin HTTP endpoint (/ready, /vips, /metrics, /config_dump), loopback only")
	fs.BoolVar(&c.Admin.Pprof, "admin-pprof", c.Admin.Pprof, "serve Go's profiles under /debug/pprof/ on the admin endpoint (memory and CPU investigations)")
	fs.StringVar(&c.Admin.ReadinessAddress, "readiness-address", c.Admin.ReadinessAddress, "also serve GET /ready alone here, e.g. :9901 for a kubelet probe (off by default)")
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "debug, info, warn or error")
	fs.StringVar(&c.Log.Format, "log-format", c.Log.Format, "text or json")
	fs.BoolVar(&c.TransparentProxy.Enabled, "transparent-proxy", c.TransparentProxy.Enabled, "install the transparent proxy (iptables) at start (needs root / NET_ADMIN)")
	fs.BoolVar(&c.TransparentProxy.UninstallOnExit, "transparent-proxy-uninstall", c.TransparentProxy.UninstallOnExit, "remove the transparent proxy's rules at exit")
	return fs.String("config", "", "YAML file with any of the settings (see docs/run.md); flags and KUMA_* variables override it")
}

func newRunFlags(c *agent.Config, stderr io.Writer) (*pflag.FlagSet, *string) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	config := bindFlags(fs, c)
	return fs, config
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
	for _, o := range options {
		fmt.Fprintf(w, "  --%-28s %-38s %s\n", o.flag, o.env, o.field)
	}
}

// parseRunConfig builds the configuration from defaults, the --config file, KUMA_*
// variables and flags, in that order of precedence. It returns exitUsage and a message
// naming the flag, variable or field and the value on any bad input, or exitOK with help.
func parseRunConfig(args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) (agent.Config, int, bool) {
	scratch := agent.Defaults()
	fs, configPath := newRunFlags(&scratch, io.Discard)
	cmd := subcommand{name: "run", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) { runUsage(w, fs) }}
	if rc, done := cmd.parse(args); done {
		return agent.Config{}, rc, true
	}
	if fs.NArg() > 0 {
		return agent.Config{}, cmd.usageErr("unexpected argument %q (every setting is a flag)", fs.Arg(0)), true
	}

	cfg := agent.Defaults()
	if *configPath != "" {
		if err := agent.LoadConfigFile(*configPath, &cfg); err != nil {
			fmt.Fprintf(stderr, "kuma-dp run: --config %s:\n%s\n", *configPath, indent(err.Error()))
			return agent.Config{}, exitUsage, true
		}
	}
	envFS, _ := newRunFlags(&cfg, io.Discard)
	for _, o := range options {
		v, ok := getenv(o.env)
		if !ok {
			continue
		}
		if err := envFS.Set(o.flag, v); err != nil {
			fmt.Fprintf(stderr, "kuma-dp run: %s=%q: invalid value for --%s: %v\n", o.env, v, o.flag, unwrapSetError(err))
			return agent.Config{}, exitUsage, true
		}
	}
	final, _ := newRunFlags(&cfg, io.Discard)
	if err := final.Parse(args); err != nil { // parsed once already: cannot fail differently
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

func unwrapSetError(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// describeConfigError names the flag, variable and file field of a bad value.
func describeConfigError(err error) string {
	var fe *agent.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	for _, o := range options {
		if o.field == fe.Field {
			return fmt.Sprintf("--%s (%s, %s in --config): %s (value %q)", o.flag, o.env, o.field, fe.Msg, fe.Value)
		}
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
	log.Info("kuma-dp starting", "pid", os.Getpid(), "version", version, "dataplane_file", cfg.Runtime.DataplaneFile,
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
