package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/internal/settings"
	"github.com/kumadp/kuma-dp/tproxy"
)

// `kuma-dp tproxy install|uninstall|verify`: the transparent proxy, standalone (an init
// container, a VM's systemd unit, or by hand). Settings: defaults < --config file <
// KUMA_TRANSPARENT_PROXY_* environment < flags.

func init() {
	register(command{name: "tproxy", summary: "install, uninstall or verify the transparent proxy (iptables)", run: runTproxy})
}

// tproxyExample is the help's examples; TestTproxyHelpExamplesWork runs each in a network
// namespace.
const tproxyExample = `Examples (5678 is the agent's UID, as in Kuma):
  kuma-dp tproxy install --dry-run
  sudo kuma-dp tproxy install --kuma-dp-user 5678 --exclude-inbound-ports 22 --exclude-outbound-ips 10.0.0.0/8
  sudo kuma-dp tproxy verify --kuma-dp-user 5678 --exclude-inbound-ports 22 --exclude-outbound-ips 10.0.0.0/8 && echo rules in place
  sudo kuma-dp tproxy uninstall
  KUMA_TRANSPARENT_PROXY_IP_FAMILY_MODE=ipv4 sudo -E kuma-dp tproxy install --config testdata/tproxy/tproxy.yaml
`

// tproxyLogger logs to stderr in the --log-format asked.
func tproxyLogger(format string, stderr io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, nil)), nil
	}
	return nil, fmt.Errorf("--log-format=%q: want text or json", format)
}

// loadTproxyConfig applies defaults < file < environment < flags, then validates: every
// error is listed, each naming its source, except a validation error about a setting whose
// value did not parse.
func loadTproxyConfig(flags *settings.Flags[tproxy.Config], getenv func(string) string) (tproxy.Config, error) {
	c, err := flags.Load(tproxy.DefaultConfig(), func(k string) (string, bool) { v := getenv(k); return v, v != "" })
	var fileErr *settings.FileError
	if errors.As(err, &fileErr) {
		return c, err
	}
	errs := []error{err}
	failed := settings.Failed(err)
	if verr := c.Validate(); verr != nil {
		list := []error{verr}
		if u, ok := verr.(interface{ Unwrap() []error }); ok {
			list = u.Unwrap()
		}
		for _, e := range list {
			flag, _, _ := strings.Cut(strings.TrimPrefix(e.Error(), "--"), "=")
			if !failed[flag] {
				errs = append(errs, e)
			}
		}
	}
	return c, errors.Join(errs...)
}

func runTproxy(args []string, stdout, stderr io.Writer) int {
	return runTproxyEnv(args, stdout, stderr, os.Getenv)
}

func runTproxyEnv(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := pflag.NewFlagSet("kuma-dp tproxy", pflag.ContinueOnError)
	flags := tproxySettings.Define(fs, tproxy.DefaultConfig())
	dryRun := fs.Bool("dry-run", false, "print the rules, interfaces and routes; change nothing")
	logFormat := fs.String("log-format", "text", "text or json (logs go to stderr)")
	cmd := subcommand{name: "tproxy", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) {
		fmt.Fprintf(w, "Usage: kuma-dp tproxy install|uninstall|verify [flags]\n\n"+
			"install    redirect outbound TCP to Envoy's outbound port, inbound TCP to its inbound port and\n"+
			"           DNS (UDP and TCP 53) to the resolver: one iptables-restore per family; idempotent\n"+
			"uninstall  remove exactly what install added (rules tagged kuma-dp/, KUMA_MESH_ chains, routes)\n"+
			"verify     compare the live rules with the expected ones; exit 1 with the difference\n\n"+
			"Settings: defaults < --config FILE < %s* environment < flags.\n"+
			"Exit codes: 0 ok, 1 invalid input, failure or (verify) a difference, 2 usage.\n\nFlags:\n%s\n%s\n"+
			"Every setting also comes from an environment variable and from the --config file:\n", tproxyEnvPrefix, fs.FlagUsages(), tproxyExample)
		tproxySettings.WriteSources(w)
	}}
	if rc, done := cmd.parse(args); done {
		return rc
	}
	usageErr := cmd.usageErr
	if fs.NArg() != 1 {
		return usageErr("want exactly one of install, uninstall, verify; got %q", fs.Args())
	}
	action := fs.Arg(0)
	switch action {
	case "install", "uninstall", "verify":
	default:
		return usageErr("unknown action %q (install, uninstall or verify)", action)
	}
	log, err := tproxyLogger(*logFormat, stderr)
	if err != nil {
		return usageErr("%v", err)
	}
	c, err := loadTproxyConfig(flags, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-dp tproxy: invalid settings:\n%v\n", err)
		return exitInvalid
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kuma-dp tproxy %s: %v\n", action, err)
		return exitInvalid
	}
	switch {
	case *dryRun && action == "install":
		if err := printTproxyPlan(ctx, stdout, c); err != nil {
			return fail(err)
		}
		return exitOK
	case *dryRun && action == "uninstall":
		plan, err := tproxy.RemovalRules(ctx, c)
		if err != nil {
			return fail(err)
		}
		if plan == "" {
			plan = "# nothing of kuma-dp installed\n"
		}
		fmt.Fprint(stdout, plan)
		return exitOK
	case action == "install":
		if err := tproxy.Install(ctx, c, log); err != nil {
			return fail(err)
		}
	case action == "uninstall":
		if err := tproxy.Uninstall(ctx, c, log); err != nil {
			return fail(err)
		}
	case action == "verify":
		return tproxyVerify(ctx, stdout, c, fail)
	}
	return exitOK
}

// tproxyVerify compares the live rules with c's: exit 0 when they match, 1 with the
// difference (or, when none of ours is there, that the proxy is not installed).
func tproxyVerify(ctx context.Context, stdout io.Writer, c tproxy.Config, fail func(error) int) int {
	diff, err := tproxy.Verify(ctx, c)
	if err != nil {
		return fail(err)
	}
	if diff != "" && !strings.Contains(diff, "\n+ ") && !strings.HasPrefix(diff, "+ ") {
		if live, err := tproxy.RemovalRules(ctx, c); err == nil && live == "" {
			rules := 0
			for _, line := range strings.Split(diff, "\n") {
				if strings.HasPrefix(line, "- ") && strings.Contains(line, " -A ") {
					rules++
				}
			}
			fmt.Fprintf(stdout, "transparent proxy not installed: none of its %d rules is in iptables (`kuma-dp tproxy install` adds them, `--dry-run` shows them)\n", rules)
			printTproxyNetwork(stdout, c)
			return exitInvalid
		}
	}
	if diff != "" {
		fmt.Fprintf(stdout, "transparent proxy differs from the expected rules (- missing, + unexpected):\n%s", diff)
		printTproxyNetwork(stdout, c)
		return exitInvalid
	}
	fmt.Fprintln(stdout, "transparent proxy installed and up to date")
	printTproxyNetwork(stdout, c)
	return exitOK
}

// printTproxyPlan prints what install would do: the rules of each family, the backend, the
// interfaces and how the VIP ranges are routed.
func printTproxyPlan(ctx context.Context, w io.Writer, c tproxy.Config) error {
	for _, f := range c.Families() {
		rules, err := tproxy.Rules(c, f)
		if err != nil {
			return err
		}
		fmt.Fprint(w, rules)
	}
	if b, err := tproxy.Backend(ctx, c); err == nil {
		fmt.Fprintf(w, "# iptables backend: %s\n", b)
	} else {
		fmt.Fprintf(w, "# iptables backend: %v\n", err)
	}
	printTproxyNetwork(w, c)
	return nil
}

// printTproxyNetwork prints the interfaces and addresses found and how each VIP range is routed.
func printTproxyNetwork(w io.Writer, c tproxy.Config) {
	if ifs, err := tproxy.Interfaces(c); err == nil {
		for _, i := range ifs {
			fmt.Fprintf(w, "# interface %s\n", i)
		}
	} else {
		fmt.Fprintf(w, "# interfaces: %v\n", err)
	}
	if routes, err := tproxy.VIPRoutes(c); err == nil {
		for _, r := range routes {
			fmt.Fprintf(w, "# VIP range %s\n", r)
		}
	} else {
		fmt.Fprintf(w, "# VIP routes: %v\n", err)
	}
}
