// Command kuma-dp is the dataplane agent: `run`, `vips`, `tproxy`, `version`.
//
// Each subcommand lives in its own file and registers itself in init; main only dispatches.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	// Heap profiling off from the first allocation: only --admin-pprof turns it on.
	"github.com/kumadp/kuma-dp/internal/buildinfo"
	_ "github.com/kumadp/kuma-dp/internal/memprof"
	"github.com/kumadp/kuma-dp/mesh"
)

// Exit codes shared by every subcommand.
const (
	exitOK      = 0
	exitInvalid = 1 // invalid input (files, policies): every error listed
	exitUsage   = 2 // bad flags or arguments
)

// command is one subcommand. run gets the arguments after the subcommand name.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("kuma-dp: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func init() {
	register(command{name: "version", summary: "print the version", run: func(args []string, stdout, stderr io.Writer) int {
		fs := pflag.NewFlagSet("version", pflag.ContinueOnError)
		cmd := subcommand{name: "version", fs: fs, stdout: stdout, stderr: stderr,
			usage: func(w io.Writer) {
				fmt.Fprintf(w, "Usage:\n  kuma-dp version\n\nPrints the version.\n\nExample:\n  kuma-dp version\n")
			}}
		if rc, done := cmd.parse(args); done {
			return rc
		}
		if fs.NArg() > 0 {
			return cmd.usageErr("unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintln(stdout, buildinfo.String("kuma-dp"))
		return exitOK
	}})
}

// topExample is kuma-dp --help's example; main_test.go runs its vips line.
const topExample = `  kuma-dp vips --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies
  kuma-dp run --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies --envoy=false &
  dig @127.0.0.1 -p 15053 httpbin.mesh
`

func usage(w io.Writer) {
	fmt.Fprintf(w, "kuma-dp: the service-mesh dataplane agent\n\nUsage:\n  kuma-dp <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nExample (the bundled example mesh, from the repository's root):\n%s\n", topExample)
	fmt.Fprintf(w, "Run 'kuma-dp <command> --help' for a command's flags and example.\n")
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help":
		if len(args) > 1 { // `kuma-dp help run` is `kuma-dp run --help`
			if c, ok := commands[args[1]]; ok {
				return c.run(append([]string{"--help"}, args[2:]...), stdout, stderr)
			}
			fmt.Fprintf(stderr, "kuma-dp help: unknown command %q\n\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	case "-h", "--help":
		usage(stdout)
		return exitOK
	case "--version":
		args[0] = "version"
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kuma-dp: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// subcommand parses a subcommand's flags and reports usage errors the same way for every
// subcommand: --help prints the usage once, on stdout, exit 0; a bad flag or argument prints
// the problem on stderr, exit 2.
type subcommand struct {
	name           string // "vips", "tproxy"
	fs             *pflag.FlagSet
	usage          func(w io.Writer)
	stdout, stderr io.Writer
}

// parse parses args; when done, the caller returns rc.
func (c subcommand) parse(args []string) (rc int, done bool) {
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {} // pflag would print it on --help, to the error output
	err := c.fs.Parse(args)
	switch {
	case err == nil:
		if msg := c.boolWithSpace(args); msg != "" {
			return c.usageErr("%s", msg), true
		}
		return exitOK, false
	case errors.Is(err, pflag.ErrHelp):
		c.usage(c.stdout)
		return exitOK, true
	default:
		return c.usageErr("%v%s", err, c.didYouMean(err)), true
	}
}

// didYouMean names the closest flag to an unknown one.
func (c subcommand) didYouMean(err error) string {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return ""
	}
	var names []string
	c.fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if s := mesh.Suggest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean --%s?)", s)
	}
	return ""
}

// boolWithSpace catches `--envoy false`: pflag reads it as --envoy (true) and an argument
// "false", the opposite of what was meant.
func (c subcommand) boolWithSpace(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok || strings.Contains(name, "=") {
			continue
		}
		f := c.fs.Lookup(name)
		if f == nil || f.Value.Type() != "bool" {
			continue
		}
		if v := args[i+1]; v == "true" || v == "false" {
			return fmt.Sprintf("%s %s: a boolean flag takes its value after '=': write --%s=%s", args[i], v, name, v)
		}
	}
	return ""
}

// usageErr reports a usage error and returns exitUsage.
func (c subcommand) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "kuma-dp "+c.name+": "+format+"\n", a...)
	fmt.Fprintf(c.stderr, "Run 'kuma-dp %s --help' for the flags and examples.\n", c.name)
	return exitUsage
}
