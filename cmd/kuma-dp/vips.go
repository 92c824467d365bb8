package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/agent"
	"github.com/kumadp/kuma-dp/internal/settings"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// `kuma-dp vips`: what a dataplane would serve (hostnames, VIPs, ports, statuses), computed
// from files without running anything.

func init() {
	register(command{name: "vips", summary: "show the hostnames and VIPs a dataplane would serve", run: runVIPs})
}

const vipsExample = `Example:
  kuma-dp vips --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies
  kuma-dp vips --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies -o json
  kuma-dp vips --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies --explain v1.backend.mesh
`

// vipsOptions is what vips is told: the model's files and the resolver's TTL as for run (the
// same settings), and how to show the result.
type vipsOptions struct {
	Run           agent.Config
	Output        string `json:"output"`
	Explain       string `json:"explain"`
	StateFile     string `json:"stateFile"`
	NoDefaultVIPs bool   `json:"noDefaultVIPs"`
	ServiceCIDR   string `json:"serviceCIDR"`
	ExternalCIDR  string `json:"externalCIDR"`
	MeshSvcCIDR   string `json:"meshServiceCIDR"`
	IPv6Prefix    string `json:"ipv6Prefix"`
}

func vipsRunConfig(o *vipsOptions) *agent.Config { return &o.Run }

// vipsSettings are vips's settings: run's for the files and the TTL, its own for the rest
// (flags only). The Field of each of its own names the vipalloc.Config field it sets, for
// errors.
var vipsSettings = &settings.Table[vipsOptions]{Settings: []settings.Setting[vipsOptions]{
	settings.Embed(runSettings, "dataplane-file", "the Dataplane this agent runs for (YAML or JSON; required)", vipsRunConfig),
	settings.Embed(runSettings, "policies-dir", "directory of the mesh's other resources: dataplanes and policies", vipsRunConfig),
	{Flag: "output", Short: "o", Field: "output", Usage: "output format: table, json or zone (an RFC 1035 zone file)"},
	{Flag: "explain", Field: "explain", Usage: "explain one hostname: which policy, selector and tuple produced it, what it beat or lost to; or a MeshExternalService or HostnameGenerator by name: which generators select which services, and why not"},
	{Flag: "state-file", Field: "stateFile", Usage: "keep VIP assignments in this file across runs (read, then written atomically)"},
	{Flag: "no-default-vips", Field: "noDefaultVIPs", Usage: "do not give every service the default name <service>.mesh"},
	{Flag: "service-cidr", Field: "serviceCIDR", Usage: "IPv4 pool of service and VirtualOutbound VIPs (the external pool is cut out of it)"},
	{Flag: "external-cidr", Field: "externalCIDR", Usage: "IPv4 pool of MeshExternalService VIPs"},
	{Flag: "mesh-service-cidr", Field: "meshServiceCIDR", Usage: "IPv4 pool of MeshService VIPs (may lie inside the service pool: no address is handed out twice)"},
	{Flag: "ipv6-prefix", Field: "ipv6Prefix", Usage: "unique local IPv6 prefix (inside fc00::/7, at most /96) of the VIPs' IPv6 twins"},
	settings.Embed(runSettings, "dns-ttl", "TTL of the records of -o zone: the resolver's TTL, the same setting as kuma-dp run --dns-ttl", vipsRunConfig),
}}

func vipsDefaults() vipsOptions {
	def := vipalloc.DefaultConfig()
	return vipsOptions{Run: agent.Defaults(), Output: "table",
		ServiceCIDR: def.ServiceCIDR, ExternalCIDR: def.ExternalCIDR, MeshSvcCIDR: def.MeshServiceCIDR, IPv6Prefix: def.IPv6Prefix}
}

func runVIPs(args []string, stdout, stderr io.Writer) int {
	return runVIPsEnv(args, stdout, stderr, os.LookupEnv)
}

func runVIPsEnv(args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) int {
	def := vipalloc.DefaultConfig()
	fs := pflag.NewFlagSet("kuma-dp vips", pflag.ContinueOnError)
	flags := vipsSettings.Define(fs, vipsDefaults())
	cmd := subcommand{name: "vips", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) {
		fmt.Fprintf(w, "Usage: kuma-dp vips --dataplane-file FILE [--policies-dir DIR] [flags]\n\n"+
			"Shows the hostnames, VIPs (IPv4 + IPv6 twin), ports and statuses the dataplane would serve.\n"+
			"Exit codes: 0 ok, 1 invalid input (every error listed: a check for CI; kuma-dp run serves a\nrefused policy file at its last good version, or without it), 2 usage.\n\nFlags:\n%s\n%s", fs.FlagUsages(), vipsExample)
	}}
	if rc, done := cmd.parse(args); done {
		return rc
	}
	usageErr := cmd.usageErr
	f, err := flags.Load(vipsDefaults(), getenv)
	if err != nil {
		return usageErr("%v", err)
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case f.Run.Runtime.DataplaneFile == "":
		return usageErr("--dataplane-file is required")
	case f.Output != "table" && f.Output != "json" && f.Output != "zone":
		return usageErr("--output %q: want table, json or zone", f.Output)
	}

	cfg := vipalloc.Config{ServiceCIDR: f.ServiceCIDR, ExternalCIDR: f.ExternalCIDR, MeshServiceCIDR: f.MeshSvcCIDR, IPv6Prefix: f.IPv6Prefix,
		DefaultServiceVIPs: !f.NoDefaultVIPs, DefaultPort: def.DefaultPort, StateFile: f.StateFile}
	alloc, err := vipalloc.New(cfg)
	if err != nil {
		var ce *vipalloc.ConfigError
		if errors.As(err, &ce) {
			for _, s := range vipsSettings.Settings {
				if strings.EqualFold(s.Field, ce.Field) {
					return usageErr("--%s %q: %s", s.Flag, ce.Value, ce.Msg)
				}
			}
		}
		return usageErr("%v", err)
	}
	snap, err := mesh.Load(f.Run.Runtime.DataplaneFile, f.Run.Runtime.PoliciesDir)
	if err != nil {
		vipsPrintInputErrors(stderr, err)
		return exitInvalid
	}
	table, err := alloc.Allocate(snap)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-dp vips: %v\n", err)
		return exitInvalid
	}
	if f.Explain != "" {
		if !table.Explain(stdout, f.Explain) && !vipsExplainSelection(stdout, snap, table, f.Explain) {
			fmt.Fprintf(stderr, "kuma-dp vips: no policy or service produces hostname %q (nor is it a MeshExternalService or a HostnameGenerator)\n", f.Explain)
			return exitInvalid
		}
		return exitOK
	}
	switch f.Output {
	case "json":
		err = vipsWriteJSON(stdout, table)
	case "zone":
		err = vipsWriteZone(stdout, table, uint32(time.Duration(f.Run.DNS.TTL)/time.Second))
	default:
		err = vipsWriteTable(stdout, table)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kuma-dp vips: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

// vipsPrintInputErrors lists every problem of the input, one a line, each with its location.
func vipsPrintInputErrors(w io.Writer, err error) {
	var es mesh.Errors
	if errors.As(err, &es) {
		fmt.Fprintf(w, "kuma-dp vips: %d error(s) in the input:\n", len(es))
		for _, e := range es {
			fmt.Fprintf(w, "  %s\n", e)
		}
		return
	}
	fmt.Fprintf(w, "kuma-dp vips: %v\n", err)
}
