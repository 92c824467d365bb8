package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/routerinstall"
	"github.com/kumadp/kuma-dp/mesh"
)

const routerExample = `Examples (the control plane on etcd of kuma-cp get --help, with testdata/routes/shard-a.yaml applied):
  kuma-cp router install shard-a --address 192.0.2.10 --address 192.0.2.11 -o dataplanes | kuma-cp apply -f - --admin-token-file /tmp/cp/admin.token
  kuma-cp router install shard-a --address 192.0.2.10 --address 192.0.2.11 \
    --cp-address grpcs://cp.example.com:5678 --ca-cert-file /tmp/cp/ca.crt --token-key-file /tmp/cp/token.key -o yaml | kubectl apply -f -
  kuma-cp router install shard-a --address 192.0.2.10 --address 192.0.2.11 \
    --cp-address grpcs://cp.example.com:5678 --ca-cert-file /tmp/cp/ca.crt --token-key-file /tmp/cp/token.key -o systemd --out-dir /tmp/shard-a
`

// routerCmd is `router install NAME`: what runs the router's replicas, rendered.
func routerCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("router install", pflag.ContinueOnError)
	apiURL := fs.String("api-url", "http://127.0.0.1:5681", "the control plane's API (the router is read there)")
	meshName := fs.StringP("mesh", "m", "default", "the router's mesh")
	output := fs.StringP("output", "o", "yaml", "yaml (Kubernetes objects, for kubectl apply), systemd (a unit per replica, into --out-dir) or dataplanes (the replicas' Dataplanes, for kuma-cp apply)")
	addrs := fs.StringSlice("address", nil, "where each replica is reached, which the router's DNS answers: one per replica (repeatable)")
	cps := fs.StringSlice("cp-address", nil, "the control plane the replicas' agents connect to, grpcs://HOST:PORT (repeatable)")
	caFile := fs.String("ca-cert-file", "", "the control plane's CA certificate (PEM), which the agents trust")
	keyFile := fs.String("token-key-file", "", "the control plane's token key: the replicas' tokens are issued with it")
	validFor := fs.Duration("valid-for", 365*24*time.Hour, "how long the replicas' tokens are accepted (0: no expiry); re-run to renew")
	namespace := fs.String("namespace", routerinstall.DefaultNamespace, "yaml: the Kubernetes namespace")
	image := fs.String("image", routerinstall.DefaultImage, "yaml: the kuma-dp image (with Envoy)")
	outDir := fs.String("out-dir", "", "systemd: the directory the units and the replicas' files are written to")
	binary := fs.String("kuma-dp-path", routerinstall.DefaultBinary, "systemd: kuma-dp on the VMs")
	envoy := fs.String("envoy-path", routerinstall.DefaultEnvoy, "systemd: Envoy on the VMs")
	if len(args) == 0 || args[0] != "install" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			args = []string{"install", "--help"}
		} else {
			fmt.Fprintln(stderr, "kuma-cp router: want: router install NAME (run 'kuma-cp router install --help')")
			return exitUsage
		}
	}
	if rc, done := cli.Parse("router install", fs, args[1:], true, commandExamples["router install"], stdout, stderr); done {
		return rc
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kuma-cp router install: %s\nRun 'kuma-cp router install --help' for the flags.\n", fmt.Sprintf(format, a...))
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usage("want one router's name, got %d arguments", fs.NArg())
	}
	if err := api.CheckURL(*apiURL); err != nil {
		return usage("%v", err)
	}
	switch {
	case *output != "yaml" && *output != "systemd" && *output != "dataplanes":
		return usage("-o %q: want yaml, systemd or dataplanes", *output)
	case *output == "systemd" && *outDir == "":
		return usage("-o systemd writes files: give --out-dir")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := api.NewClient(*apiURL, "").Get(ctx, *meshName, "routers", fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp router install: %v\n", err)
		return exitFail
	}
	rs, err := mesh.Decode(res.Mesh+"/Router/"+res.Name, res.Spec)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp router install: %v\n", err)
		return exitFail
	}
	o := routerinstall.Options{Router: rs[0].(*mesh.Router), Addresses: *addrs, ControlPlanes: *cps,
		Namespace: *namespace, Image: *image, Binary: *binary, Envoy: *envoy}
	o.Router.Mesh = res.Mesh
	if *output != "dataplanes" {
		if o.CACert, o.Token, err = routerinstall.Credentials(*caFile, *keyFile, res.Mesh, *validFor); err != nil {
			return usage("%v", err)
		}
	}
	switch *output {
	case "dataplanes":
		err = routerinstall.Dataplanes(stdout, o)
	case "yaml":
		err = routerinstall.Kubernetes(stdout, o)
	case "systemd":
		err = routerinstall.WriteSystemd(o, *outDir, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp router install: %v\n", err)
		return exitFail
	}
	return exitOK
}
