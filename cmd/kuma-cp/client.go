package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/mesh"
)

const clientExample = `Examples (etcd, then a control plane on it with its API on 127.0.0.1:5681, then the client):
  etcd --data-dir /tmp/cp/etcd &
  head -c 32 /dev/urandom | base64 > /tmp/cp/admin.token
  kuma-cp serve --store etcd --etcd-endpoints http://127.0.0.1:2379 --admin-token-file /tmp/cp/admin.token &
  kuma-cp apply -f testdata/mesh/policies/virtualoutbounds-kuma.yaml --admin-token-file /tmp/cp/admin.token
  kuma-cp get virtualoutbounds
  kuma-cp get virtualoutbounds kuma-versioned -o yaml
  kuma-cp inspect dataplanes
  kuma-cp delete virtualoutbounds kuma-versioned --admin-token-file /tmp/cp/admin.token
  kuma-cp get status
`

// clientCmd is apply, get and delete: the API's client.
func clientCmd(name string, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	apiURL := fs.String("api-url", cli.DefaultAPIURL, "the control plane's API (else $KUMA_API_URL, else the current control plane of kuma-cp config control-planes)")
	tokenFile := fs.String("admin-token-file", "", "file holding the admin token (writes; else $KUMA_ADMIN_TOKEN, else the current control plane's)")
	meshName := fs.StringP("mesh", "m", "default", "the mesh (get, delete, describe; \"*\" lists every mesh)")
	files := fs.StringSliceP("filename", "f", nil, "apply: a file, a directory (read recursively) or - (standard input)")
	output := fs.StringP("output", "o", "table", "get, inspect: table, yaml or json")
	namespace := fs.StringP("namespace", "n", "", "routes, routebindings: get, delete, describe of one: its namespace (or give NAME as name.namespace); get of a list: that namespace's only")
	waitFor := fs.Bool("wait", false, "apply: wait until each applied route is scheduled, print its final DNS name (or why it is not scheduled yet)")
	waitTimeout := fs.Duration("timeout", time.Minute, "apply --wait: how long to wait")
	for f, cmds := range flagCommands {
		if !slices.Contains(cmds, name) {
			_ = fs.MarkHidden(f) // refused below, naming the commands it is for; not in --help
		}
	}
	if rc, done := parseArgs(name, fs, args, name != "apply", stdout, stderr); done {
		if rc == exitOK && name != "describe" {
			fmt.Fprint(stdout, "\n"+clientExample)
		}
		return rc
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kuma-cp %s: %s\nRun 'kuma-cp %s --help' for the flags.\n", name, fmt.Sprintf(format, a...), name)
		return exitUsage
	}
	for _, f := range []string{"filename", "wait", "timeout", "output", "namespace", "mesh"} {
		if fs.Changed(f) && !slices.Contains(flagCommands[f], name) {
			return usage("--%s is for %s, not %s%s", f, strings.Join(flagCommands[f], ", "), name, flagWhy[f+" "+name])
		}
	}
	if *meshName == "" {
		return usage("--mesh is empty: want a mesh's name (or \"*\": every mesh, for a list)")
	}
	target, err := cli.Resolve(*apiURL, fs.Changed("api-url"), *tokenFile, os.Getenv)
	if err != nil {
		return usage("%v", err)
	}
	if err := api.CheckURL(target.URL); err != nil {
		return usage("%v (from %s)", err, target.From)
	}
	c := api.NewClient(target.URL, target.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fail := func(err error) int {
		if nf := (*api.NotFoundError)(nil); errors.As(err, &nf) {
			fmt.Fprintf(stderr, "Error: %v\n", nf) // as kumactl's
			return exitFail
		}
		fmt.Fprintf(stderr, "kuma-cp %s: %v\n", name, err)
		return exitFail
	}
	typeArg := func() (string, int) {
		if fs.NArg() == 0 {
			return "", usage("a TYPE is needed: %s", strings.Join(typeNames(), ", "))
		}
		if strings.ToLower(fs.Arg(0)) == "status" && name == "get" {
			return "status", exitOK
		}
		t, ok := api.ParseType(fs.Arg(0))
		if !ok {
			return "", usage("TYPE %q: want one of %s (or the singular)", fs.Arg(0), strings.Join(typeNames(), ", "))
		}
		return t, exitOK
	}
	// nameArg is the NAME of get or delete (ok false: refused): one mesh, and a route's
	// namespace joined to it as the store names it.
	nameArg := func(t string) (string, int, bool) {
		if *meshName == "*" {
			return "", usage("--mesh \"*\" lists every mesh: %s %s NAME needs one mesh (--mesh M)", name, t), false
		}
		n := fs.Arg(1)
		if *namespace != "" {
			if t != "routes" && t != "routebindings" {
				return "", usage("-n %q: only routes and routebindings have a namespace, not %s", *namespace, t), false
			}
			if !strings.Contains(n, ".") {
				n += "." + *namespace
			}
		}
		return n, exitOK, true
	}
	switch name {
	case "apply":
		if len(*files) == 0 {
			return usage("-f FILE|DIR|- is required")
		}
		var sources []api.Source
		for _, f := range *files {
			srcs, err := readSources(f)
			if err != nil {
				return fail(err)
			}
			sources = append(sources, srcs...)
		}
		applied, err := c.ApplyAll(ctx, sources)
		for _, a := range applied {
			fmt.Fprintf(stdout, "%s %s/%s %s", a.Type, a.Mesh, a.Name, a.Result)
			if len(a.Kept) > 0 {
				fmt.Fprintf(stdout, " (kept as written, not acted on here: %s)", strings.Join(a.Kept, ", "))
			}
			fmt.Fprintln(stdout)
		}
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) && ae.Status == 409 {
				err = fmt.Errorf("%w (changed by someone else meanwhile: apply again)", err)
			}
			return fail(err)
		}
		if *waitFor {
			if err := waitRoutes(ctx, c, applied, *waitTimeout, stdout); err != nil {
				return fail(err)
			}
		}
		return exitOK
	case "describe":
		return describeCmd(ctx, c, fs.Args(), *meshName, *namespace, stdout, usage, fail)
	case "inspect":
		if fs.NArg() != 1 || fs.Arg(0) == "" {
			return usage("want: inspect dataplanes [-m MESH] [-o table|yaml|json]")
		}
		if t, ok := api.ParseType(fs.Arg(0)); !ok || t != "dataplanes" {
			return usage("inspect %q: only dataplanes are inspected", fs.Arg(0))
		}
		if err := api.CheckFormat(*output); err != nil {
			return usage("%v", err)
		}
		dps, err := c.List(ctx, *meshName, "dataplanes")
		if err != nil {
			return fail(err)
		}
		agents, err := c.Agents(ctx)
		if err != nil {
			return fail(err)
		}
		if err := api.PrintInspectDataplanesAs(stdout, *output, dps, agents, time.Now()); err != nil {
			return fail(err)
		}
		return exitOK
	case "get":
		t, rc := typeArg()
		if rc != exitOK {
			return rc
		}
		if err := api.CheckFormat(*output); err != nil {
			return usage("%v", err)
		}
		if fs.NArg() > 2 || (t == "status" && fs.NArg() > 1) {
			return usage("unexpected argument %q: want get TYPE [NAME] (or get status)", fs.Arg(fs.NArg()-1))
		}
		if *namespace != "" && fs.NArg() < 2 && t != "routes" && t != "routebindings" {
			return usage("-n %q: only routes and routebindings have a namespace, not %s", *namespace, t)
		}
		if t == "status" {
			if err := getStatus(ctx, c, *output, stdout); err != nil {
				return fail(err)
			}
			return exitOK
		}
		if (t == "routers" || t == "routes") && (*output == "table" || *output == "") && (fs.NArg() == 1 || t == "routers") {
			n := ""
			if fs.NArg() > 1 { // a router: --mesh and -n checked as for any NAME
				var ok bool
				if n, rc, ok = nameArg(t); !ok {
					return rc
				}
			}
			if err := printRouting(ctx, c, t, *meshName, n, *namespace, stdout); err != nil {
				return fail(err)
			}
			return exitOK
		}
		if fs.NArg() > 1 {
			n, rc, ok := nameArg(t)
			if !ok {
				return rc
			}
			r, err := c.Get(ctx, *meshName, t, n)
			if err != nil {
				return fail(err)
			}
			if err := api.PrintOne(stdout, *output, r, time.Now()); err != nil {
				return fail(err)
			}
			return exitOK
		}
		listMesh := *meshName
		if t == "meshes" && !fs.Changed("mesh") {
			listMesh = "*" // get meshes: every Mesh, as kumactl's
		}
		rs, err := c.List(ctx, listMesh, t)
		if err != nil {
			return fail(err)
		}
		if *namespace != "" {
			rs = api.InNamespace(rs, *namespace)
		}
		if err := api.Print(stdout, *output, t, rs, time.Now()); err != nil {
			return fail(err)
		}
		return exitOK
	default: // delete
		t, rc := typeArg()
		if rc != exitOK {
			return rc
		}
		switch {
		case fs.NArg() < 2:
			return usage("want: delete TYPE NAME")
		case fs.NArg() > 2:
			return usage("unexpected argument %q: want delete TYPE NAME", fs.Arg(2))
		}
		n, rc, ok := nameArg(t)
		if !ok {
			return rc
		}
		if err := c.Delete(ctx, *meshName, t, n); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "deleted %s %s/%s\n", t, *meshName, n)
		return exitOK
	}
}

func typeNames() []string {
	return []string{"dataplanes", "virtualoutbounds", "trafficroutes", "meshexternalservices", "hostnamegenerators", "routers", "routes", "routebindings", "meshes"}
}

// flagCommands are the commands a flag is for: another refuses it (it used to be ignored).
var flagCommands = map[string][]string{
	"filename":  {"apply"},
	"wait":      {"apply"},
	"timeout":   {"apply"},
	"output":    {"get", "inspect"},
	"namespace": {"get", "delete", "describe"},
	"mesh":      {"get", "delete", "describe", "inspect"},
}

// flagWhy completes the refusal of a flag a user may expect a command to take.
var flagWhy = map[string]string{
	"mesh apply": " (each resource's mesh is its document's)",
}

func getStatus(ctx context.Context, c *api.Client, format string, out io.Writer) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	return api.PrintStatusAs(out, format, bytes.NewReader(st))
}

// readSources reads a file, every resource file under a directory, or standard input.
func readSources(path string) ([]api.Source, error) {
	var paths []string
	switch fi, err := os.Stat(path); {
	case path == "-":
		paths = []string{"-"}
	case err != nil:
		return nil, err
	case fi.IsDir():
		files, errs := mesh.ResourceFiles(path)
		if len(errs) > 0 {
			return nil, errs
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no resource in %s (no .yaml, .yml or .json file under it): nothing applied", path)
		}
		paths = files
	default:
		paths = []string{path}
	}
	var out []api.Source
	for _, p := range paths {
		var data []byte
		var err error
		if p == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(p)
		}
		if err != nil {
			return nil, err
		}
		name := filepath.Clean(p)
		if p == "-" {
			name = "STDIN" // as kubectl names it in errors (not "-#2")
		}
		out = append(out, api.Source{Name: name, Data: data})
	}
	return out, nil
}
