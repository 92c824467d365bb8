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

	"github.com/spf13/pflag"
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

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register(command{name: "version", summary: "print the version", run: func(_ []string, stdout, _ io.Writer) int {
		fmt.Fprintf(stdout, "kuma-dp %s\n", version)
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
	case "-h", "--help", "help":
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
		return exitOK, false
	case errors.Is(err, pflag.ErrHelp):
		c.usage(c.stdout)
		return exitOK, true
	default:
		return c.usageErr("%v", err), true
	}
}

// usageErr reports a usage error and returns exitUsage.
func (c subcommand) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "kuma-dp "+c.name+": "+format+"\n", a...)
	fmt.Fprintf(c.stderr, "Run 'kuma-dp %s --help' for the flags and examples.\n", c.name)
	return exitUsage
}
