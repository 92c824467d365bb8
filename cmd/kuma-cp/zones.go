package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// zonesCmd prints the zones the control plane serves for router shards, read from the store:
// RFC 1035 master files (for nsd, knot or BIND) or JSON.
func zonesCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("zones", pflag.ContinueOnError)
	var conn cli.Etcd
	conn.Bind(fs, "etcd client URLs, comma-separated (required)")
	userZones := fs.StringSlice("dns-user-zone", nil, "a users' domain served (as kuma-cp serve --dns-user-zone)")
	output := fs.StringP("output", "o", "zone", "zone (RFC 1035 master files) or json")
	if rc, done := parse("zones", fs, args, stdout, stderr); done {
		return rc
	}
	if conn.Endpoints == "" {
		fmt.Fprintln(stderr, "kuma-cp zones: --etcd-endpoints is required\nRun 'kuma-cp zones --help' for the flags.")
		return exitUsage
	}
	if *output != "zone" && *output != "json" {
		fmt.Fprintf(stderr, "kuma-cp zones: -o %q: want zone or json\n", *output)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Check(ctx); err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: %v\n", err)
		return exitFail
	}
	cl, err := conn.Client()
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: %v\n", err)
		return exitFail
	}
	defer cl.Close()
	items, _, _, err := cpstore.NewEtcd(cl, conn.Prefix).List(ctx, "", "", "", 0)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: reading etcd (--etcd-endpoints %s): %v\n", conn.Endpoints, err)
		return exitFail
	}
	in := shardzones.Input(items, nil, nil)
	in.UserZones = *userZones
	cat, problems := authdns.Build(in, nil)
	for _, p := range problems {
		fmt.Fprintf(stderr, "kuma-cp zones: not served: %v\n", p)
	}
	if *output == "json" {
		type zone struct {
			Origin  string   `json:"origin"`
			Serial  uint32   `json:"serial"`
			Records []string `json:"records"`
		}
		var out []zone
		for _, z := range cat.Zones() {
			zz := zone{Origin: z.Origin, Serial: z.Serial()}
			for _, rr := range z.Records() {
				zz.Records = append(zz.Records, rr.String())
			}
			out = append(out, zz)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitFail
		}
		return exitOK
	}
	for i, z := range cat.Zones() {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := authdns.WriteZone(stdout, z); err != nil {
			return exitFail
		}
	}
	return exitOK
}
