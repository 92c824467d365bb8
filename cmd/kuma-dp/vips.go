package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/agent"
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

type vipsFlags struct {
	dataplaneFile, policiesDir string
	output, explain, stateFile string
	noDefaultVIPs              bool
	ttl                        time.Duration
	serviceCIDR, externalCIDR  string
	ipv6Prefix                 string
}

// vipsConfigFlag names the flag behind each vipalloc.Config field, for error messages.
var vipsConfigFlag = map[string]string{
	"ServiceCIDR":  "--service-cidr",
	"ExternalCIDR": "--external-cidr",
	"IPv6Prefix":   "--ipv6-prefix",
}

func runVIPs(args []string, stdout, stderr io.Writer) int {
	var f vipsFlags
	def := vipalloc.DefaultConfig()
	fs := pflag.NewFlagSet("kuma-dp vips", pflag.ContinueOnError)
	fs.StringVar(&f.dataplaneFile, "dataplane-file", "", "the Dataplane this agent runs for (YAML or JSON; required)")
	fs.StringVar(&f.policiesDir, "policies-dir", "", "directory of the mesh's other resources: dataplanes and policies")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table, json or zone (an RFC 1035 zone file)")
	fs.StringVar(&f.explain, "explain", "", "explain one hostname: which policy, selector and tuple produced it, what it beat or lost to")
	fs.StringVar(&f.stateFile, "state-file", "", "keep VIP assignments in this file across runs (read, then written atomically)")
	fs.BoolVar(&f.noDefaultVIPs, "no-default-vips", false, "do not give every service the default name <service>.mesh")
	fs.StringVar(&f.serviceCIDR, "service-cidr", def.ServiceCIDR, "IPv4 pool of service and VirtualOutbound VIPs (the external pool is cut out of it)")
	fs.StringVar(&f.externalCIDR, "external-cidr", def.ExternalCIDR, "IPv4 pool of MeshExternalService VIPs")
	fs.StringVar(&f.ipv6Prefix, "ipv6-prefix", def.IPv6Prefix, "IPv6 prefix (at most /96) of the VIPs' IPv6 twins")
	fs.DurationVar(&f.ttl, "dns-ttl", time.Duration(agent.Defaults().DNS.TTL), "TTL of the records of -o zone: the resolver's TTL, the same setting as kuma-dp run --dns-ttl")
	cmd := subcommand{name: "vips", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) {
		fmt.Fprintf(w, "Usage: kuma-dp vips --dataplane-file FILE [--policies-dir DIR] [flags]\n\n"+
			"Shows the hostnames, VIPs (IPv4 + IPv6 twin), ports and statuses the dataplane would serve.\n"+
			"Exit codes: 0 ok, 1 invalid input (every error listed), 2 usage.\n\nFlags:\n%s\n%s", fs.FlagUsages(), vipsExample)
	}}
	if rc, done := cmd.parse(args); done {
		return rc
	}
	usageErr := cmd.usageErr
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case f.dataplaneFile == "":
		return usageErr("--dataplane-file is required")
	case f.output != "table" && f.output != "json" && f.output != "zone":
		return usageErr("--output %q: want table, json or zone", f.output)
	}

	cfg := vipalloc.Config{ServiceCIDR: f.serviceCIDR, ExternalCIDR: f.externalCIDR, IPv6Prefix: f.ipv6Prefix,
		DefaultServiceVIPs: !f.noDefaultVIPs, DefaultPort: def.DefaultPort, StateFile: f.stateFile}
	alloc, err := vipalloc.New(cfg)
	if err != nil {
		var ce *vipalloc.ConfigError
		if errors.As(err, &ce) && vipsConfigFlag[ce.Field] != "" {
			return usageErr("%s %q: %s", vipsConfigFlag[ce.Field], ce.Value, ce.Msg)
		}
		return usageErr("%v", err)
	}
	snap, err := mesh.Load(f.dataplaneFile, f.policiesDir)
	if err != nil {
		vipsPrintInputErrors(stderr, err)
		return exitInvalid
	}
	table, err := alloc.Allocate(snap)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-dp vips: %v\n", err)
		return exitInvalid
	}
	if f.explain != "" {
		if !vipsExplain(stdout, table, f.explain) {
			fmt.Fprintf(stderr, "kuma-dp vips: no policy or service produces hostname %q\n", f.explain)
			return exitInvalid
		}
		return exitOK
	}
	switch f.output {
	case "json":
		err = vipsWriteJSON(stdout, table)
	case "zone":
		err = vipsWriteZone(stdout, table, uint32(f.ttl/time.Second))
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
