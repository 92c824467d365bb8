package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/server"
	"github.com/kumadp/kuma-dp/cp/shardzones"
)

// zonesCmd prints the zones the control plane serves for router shards, read from the store
// (shardzones.Served: the replicas' readiness and the zones' serials included): RFC 1035
// master files (for nsd, knot or BIND) or JSON.
func zonesCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("zones", pflag.ContinueOnError)
	var conn cli.Etcd // serve's etcd flags: TLS and a user too
	conn.Bind(fs, "etcd client URLs, comma-separated (required)")
	var dc server.DNSConfig // the zones' settings, as given to kuma-cp serve: the same zones, the same serials
	fs.StringSliceVar(&dc.UserZones, "dns-user-zone", nil, "a users' domain served (as kuma-cp serve --dns-user-zone)")
	fs.StringSliceVar(&dc.Nameservers, "dns-nameserver", nil, "NS of every zone, NAME or NAME=IP (as kuma-cp serve --dns-nameserver)")
	fs.StringVar(&dc.Address, "dns-address", "", "the replicas' --dns-address (the default NS's address)")
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
	for _, z := range dc.UserZones {
		if err := routing.CheckUserZone(z); err != nil {
			fmt.Fprintf(stderr, "kuma-cp zones: --dns-user-zone: %v\n", err)
			return exitUsage
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Check(ctx); err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: %v\n", err)
		return exitFail
	}
	cl, err := conn.Client(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: %v\n", err)
		return exitFail
	}
	defer cl.Close()
	in, err := dc.Input()
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: %v\n", err)
		return exitUsage
	}
	cat, problems, err := shardzones.Served(ctx, cl.Client, conn.Prefix, in)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp zones: reading etcd (--etcd-endpoints %s): %v\n", conn.Endpoints, err)
		return exitFail
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "kuma-cp zones: warning: %v\n", p)
	}
	if *output == "json" {
		out := api.ZonesOf(cat)
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
