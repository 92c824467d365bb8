package cli

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
	"github.com/kumadp/kuma-dp/mesh"
)

// Exit codes of every kuma-cp command: a command line that cannot be right is 2, before any
// request; what failed after is 1.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
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

// FlagCommands are the API commands each client flag is for: another refuses it (it used to
// be ignored) and its --help leaves it out.
var FlagCommands = map[string][]string{
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

// clientFlags are the API commands' flags.
type clientFlags struct {
	apiURL, tokenFile, mesh, output, namespace string
	files                                      []string
	wait                                       bool
	timeout                                    time.Duration
}

// command is one run of an API command: its flags, its client, where it prints.
type command struct {
	name           string
	fs             *pflag.FlagSet
	f              clientFlags
	c              *api.Client
	stdout, stderr io.Writer
}

// Client runs the API command name (apply, get, delete, describe, inspect) with args, its
// API and token from the flags, the environment or the client configuration (Resolve).
func Client(name string, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	k := &command{name: name, fs: pflag.NewFlagSet(name, pflag.ContinueOnError), stdout: stdout, stderr: stderr}
	k.bind()
	example := ""
	if name == "describe" {
		example = describeExample
	}
	if rc, done := Parse(name, k.fs, args, name != "apply", example, stdout, stderr); done {
		if rc == ExitOK && name != "describe" {
			fmt.Fprint(stdout, "\n"+clientExample)
		}
		return rc
	}
	for _, f := range []string{"filename", "wait", "timeout", "output", "namespace", "mesh"} {
		if k.fs.Changed(f) && !slices.Contains(FlagCommands[f], name) {
			return k.usage("--%s is for %s, not %s%s", f, strings.Join(FlagCommands[f], ", "), name, flagWhy[f+" "+name])
		}
	}
	if k.f.mesh == "" {
		return k.usage("--mesh is empty: want a mesh's name (or \"*\": every mesh, for a list)")
	}
	target, err := Resolve(k.f.apiURL, k.fs.Changed("api-url"), k.f.tokenFile, getenv)
	if err != nil {
		return k.usage("%v", err)
	}
	if err := api.CheckURL(target.URL); err != nil {
		return k.usage("%v (from %s)", err, target.From)
	}
	k.c = api.NewClient(target.URL, target.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch name {
	case "apply":
		return k.apply(ctx)
	case "describe":
		return k.describe(ctx)
	case "inspect":
		return k.inspect(ctx)
	case "get":
		return k.get(ctx)
	}
	return k.delete(ctx)
}

func (k *command) bind() {
	fs, f := k.fs, &k.f
	fs.StringVar(&f.apiURL, "api-url", DefaultAPIURL, "the control plane's API (else $KUMA_API_URL, else the current control plane of kuma-cp config control-planes)")
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "file holding the admin token (writes; else $KUMA_ADMIN_TOKEN, else the current control plane's)")
	fs.StringVarP(&f.mesh, "mesh", "m", "default", "the mesh (get, delete, describe; \"*\" lists every mesh)")
	fs.StringSliceVarP(&f.files, "filename", "f", nil, "apply: a file, a directory (read recursively) or - (standard input)")
	fs.StringVarP(&f.output, "output", "o", "table", "get, inspect: table, yaml or json")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "routes, routebindings: get, delete, describe of one: its namespace (or give NAME as name.namespace); get of a list: that namespace's only")
	fs.BoolVar(&f.wait, "wait", false, "apply: wait until each applied route is scheduled, print its final DNS name (or why it is not scheduled yet)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "apply --wait: how long to wait")
	for flag, cmds := range FlagCommands {
		if !slices.Contains(cmds, k.name) {
			_ = fs.MarkHidden(flag) // refused by Client, naming the commands it is for; not in --help
		}
	}
}

// usage refuses the command line (exit 2), naming what is wrong.
func (k *command) usage(format string, a ...any) int {
	fmt.Fprintf(k.stderr, "kuma-cp %s: %s\nRun 'kuma-cp %s --help' for the flags.\n", k.name, fmt.Sprintf(format, a...), k.name)
	return ExitUsage
}

// fail reports what failed after the command line was accepted (exit 1); a missing resource
// as kumactl's error.
func (k *command) fail(err error) int {
	if nf := (*api.NotFoundError)(nil); errors.As(err, &nf) {
		fmt.Fprintf(k.stderr, "Error: %v\n", nf)
		return ExitFail
	}
	fmt.Fprintf(k.stderr, "kuma-cp %s: %v\n", k.name, err)
	return ExitFail
}

// typeArg is the TYPE argument as the API's type ("status" for get status).
func (k *command) typeArg() (string, int) {
	if k.fs.NArg() == 0 {
		return "", k.usage("a TYPE is needed: %s", strings.Join(typeNames(), ", "))
	}
	if strings.ToLower(k.fs.Arg(0)) == "status" && k.name == "get" {
		return "status", ExitOK
	}
	t, ok := api.ParseType(k.fs.Arg(0))
	if !ok {
		return "", k.usage("TYPE %q: want one of %s (or the singular)", k.fs.Arg(0), strings.Join(typeNames(), ", "))
	}
	return t, ExitOK
}

// nameArg is the NAME of get or delete (ok false: refused): one mesh, and a route's
// namespace joined to it as the store names it.
func (k *command) nameArg(t string) (string, int, bool) {
	if k.f.mesh == "*" {
		return "", k.usage("--mesh \"*\" lists every mesh: %s %s NAME needs one mesh (--mesh M)", k.name, t), false
	}
	n := k.fs.Arg(1)
	if k.f.namespace != "" {
		if t != "routes" && t != "routebindings" {
			return "", k.usage("-n %q: only routes and routebindings have a namespace, not %s", k.f.namespace, t), false
		}
		if !strings.Contains(n, ".") {
			n += "." + k.f.namespace
		}
	}
	return n, ExitOK, true
}

func (k *command) apply(ctx context.Context) int {
	if len(k.f.files) == 0 {
		return k.usage("-f FILE|DIR|- is required")
	}
	var sources []api.Source
	for _, f := range k.f.files {
		srcs, err := readSources(f)
		if err != nil {
			return k.fail(err)
		}
		sources = append(sources, srcs...)
	}
	applied, err := k.c.ApplyAll(ctx, sources)
	for _, a := range applied {
		fmt.Fprintf(k.stdout, "%s %s/%s %s", a.Type, a.Mesh, a.Name, a.Result)
		if len(a.Kept) > 0 {
			fmt.Fprintf(k.stdout, " (kept as written, not acted on here: %s)", strings.Join(a.Kept, ", "))
		}
		fmt.Fprintln(k.stdout)
	}
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == 409 {
			err = fmt.Errorf("%w (changed by someone else meanwhile: apply again)", err)
		}
		return k.fail(err)
	}
	if k.f.wait {
		if err := waitRoutes(ctx, k.c, applied, k.f.timeout, k.stdout); err != nil {
			return k.fail(err)
		}
	}
	return ExitOK
}

func (k *command) inspect(ctx context.Context) int {
	if k.fs.NArg() != 1 || k.fs.Arg(0) == "" {
		return k.usage("want: inspect dataplanes [-m MESH] [-o table|yaml|json]")
	}
	if t, ok := api.ParseType(k.fs.Arg(0)); !ok || t != "dataplanes" {
		return k.usage("inspect %q: only dataplanes are inspected", k.fs.Arg(0))
	}
	if err := api.CheckFormat(k.f.output); err != nil {
		return k.usage("%v", err)
	}
	dps, err := k.c.List(ctx, k.f.mesh, "dataplanes")
	if err != nil {
		return k.fail(err)
	}
	agents, err := k.c.Agents(ctx)
	if err != nil {
		return k.fail(err)
	}
	if err := api.PrintInspectDataplanesAs(k.stdout, k.f.output, dps, agents, time.Now()); err != nil {
		return k.fail(err)
	}
	return ExitOK
}

func (k *command) get(ctx context.Context) int {
	t, rc := k.typeArg()
	if rc != ExitOK {
		return rc
	}
	fs, f := k.fs, &k.f
	if err := api.CheckFormat(f.output); err != nil {
		return k.usage("%v", err)
	}
	if fs.NArg() > 2 || (t == "status" && fs.NArg() > 1) {
		return k.usage("unexpected argument %q: want get TYPE [NAME] (or get status)", fs.Arg(fs.NArg()-1))
	}
	if f.namespace != "" && fs.NArg() < 2 && t != "routes" && t != "routebindings" {
		return k.usage("-n %q: only routes and routebindings have a namespace, not %s", f.namespace, t)
	}
	if t == "status" {
		if err := getStatus(ctx, k.c, f.output, k.stdout); err != nil {
			return k.fail(err)
		}
		return ExitOK
	}
	if (t == "routers" || t == "routes") && (f.output == "table" || f.output == "") && (fs.NArg() == 1 || t == "routers") {
		n := ""
		if fs.NArg() > 1 { // a router: --mesh and -n checked as for any NAME
			var ok bool
			if n, rc, ok = k.nameArg(t); !ok {
				return rc
			}
		}
		if err := printRouting(ctx, k.c, t, f.mesh, n, f.namespace, k.stdout); err != nil {
			return k.fail(err)
		}
		return ExitOK
	}
	if fs.NArg() > 1 {
		n, rc, ok := k.nameArg(t)
		if !ok {
			return rc
		}
		r, err := k.c.Get(ctx, f.mesh, t, n)
		if err != nil {
			return k.fail(err)
		}
		if err := api.PrintOne(k.stdout, f.output, r, time.Now()); err != nil {
			return k.fail(err)
		}
		return ExitOK
	}
	listMesh := f.mesh
	if t == "meshes" && !fs.Changed("mesh") {
		listMesh = "*" // get meshes: every Mesh, as kumactl's
	}
	rs, err := k.c.List(ctx, listMesh, t)
	if err != nil {
		return k.fail(err)
	}
	if f.namespace != "" {
		rs = api.InNamespace(rs, f.namespace)
	}
	if err := api.Print(k.stdout, f.output, t, rs, time.Now()); err != nil {
		return k.fail(err)
	}
	return ExitOK
}

func (k *command) delete(ctx context.Context) int {
	t, rc := k.typeArg()
	if rc != ExitOK {
		return rc
	}
	switch {
	case k.fs.NArg() < 2:
		return k.usage("want: delete TYPE NAME")
	case k.fs.NArg() > 2:
		return k.usage("unexpected argument %q: want delete TYPE NAME", k.fs.Arg(2))
	}
	n, rc, ok := k.nameArg(t)
	if !ok {
		return rc
	}
	if err := k.c.Delete(ctx, k.f.mesh, t, n); err != nil {
		return k.fail(err)
	}
	fmt.Fprintf(k.stdout, "deleted %s %s/%s\n", t, k.f.mesh, n)
	return ExitOK
}

func typeNames() []string {
	return []string{"dataplanes", "virtualoutbounds", "trafficroutes", "meshexternalservices", "hostnamegenerators",
		"meshservices", "meshtcproutes", "meshhttproutes", "routers", "routes", "routebindings", "meshes"}
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
		name := filepath.Clean(p)
		if p == "-" {
			data, err = io.ReadAll(os.Stdin)
			name = "STDIN" // as kubectl names it in errors (not "-#2")
		} else {
			data, err = os.ReadFile(p)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, api.Source{Name: name, Data: data})
	}
	return out, nil
}

// Parse parses a command's flags: help on stdout with example at its end (exit 0), a bad
// flag on stderr (exit 2); done is false when the command is to run. An argument is
// refused unless positional.
func Parse(name string, fs *pflag.FlagSet, args []string, positional bool, example string, stdout, stderr io.Writer) (rc int, done bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil && fs.NArg() > 0 && !positional:
		fmt.Fprintf(stderr, "kuma-cp %s: unexpected argument %q\n", name, fs.Arg(0))
		return ExitUsage, true
	case err == nil:
		return ExitOK, false
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "Usage:\n  kuma-cp %s [flags]\n\nFlags:\n%s", name, fs.FlagUsages())
		if example != "" {
			fmt.Fprint(stdout, "\n"+example)
		}
		return ExitOK, true
	}
	fmt.Fprintf(stderr, "kuma-cp %s: %v\nRun 'kuma-cp %s --help' for the flags.\n", name, err, name)
	return ExitUsage, true
}
