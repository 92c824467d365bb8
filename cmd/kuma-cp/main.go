// Command kuma-cp is a small reference control plane for kuma-dp agents: it serves a
// watched directory (or etcd) of resources over incremental ADS (delta xDS, its own server in
// cp/fanout) to many agents, checks their tokens, validates with the agent's own code
// (package mesh) and sends each agent only its mesh. See docs/cplink.md.
//
// This command holds the flags and the dispatch only: serve runs cp/server, the API
// commands are cp/cli's, zones reads cp/shardzones, router install renders cp/routerinstall.
//
//	kuma-cp certs --out-dir DIR            # CA, server certificate, token key (demo, tests)
//	kuma-cp token --token-key-file K --name N --mesh M
//	kuma-cp serve --resources-dir DIR --tls-cert-file C --tls-key-file K --token-key-file T
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
)

const (
	exitOK    = cli.ExitOK
	exitFail  = cli.ExitFail
	exitUsage = cli.ExitUsage
)

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }

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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
