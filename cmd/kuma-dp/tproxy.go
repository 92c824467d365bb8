package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/tproxy"
)

// `kuma-dp tproxy install|uninstall|verify`: the transparent proxy, standalone (an init
// container, a VM's systemd unit, or by hand). Settings: defaults < --config file <
// KUMA_TRANSPARENT_PROXY_* environment < flags.

func init() {
	register(command{name: "tproxy", summary: "install, uninstall or verify the transparent proxy (iptables)", run: runTproxy})
}

const tproxyEnvPrefix = "KUMA_TRANSPARENT_PROXY_"

// tproxyExample is the help's examples; TestTproxyHelpExamplesWork runs each in a network
// namespace.
const tproxyExample = `Examples (5678 is the agent's UID, as in Kuma):
  kuma-dp tproxy install --dry-run
  sudo kuma-dp tproxy install --kuma-dp-user 5678 --exclude-inbound-ports 22 --exclude-outbound-ips 10.0.0.0/8
  sudo kuma-dp tproxy verify --kuma-dp-user 5678 --exclude-inbound-ports 22 --exclude-outbound-ips 10.0.0.0/8 && echo rules in place
  sudo kuma-dp tproxy uninstall
  KUMA_TRANSPARENT_PROXY_IP_FAMILY_MODE=ipv4 sudo -E kuma-dp tproxy install --config testdata/tproxy/tproxy.yaml
`

// tproxySetting is one setting: its flag (Kuma's name), environment variable and how a
// string value applies to the config. Every setting is also a key of the YAML file (the
// JSON names of tproxy.Config).
type tproxySetting struct {
	flag, usage string
	typ         string // shown in --help: port, ports, cidrs, string
	isBool      bool
	repeatable  bool // each use adds one entry (entries may contain commas)
	apply       func(c *tproxy.Config, v string) error
}

func (s tproxySetting) env() string {
	return tproxyEnvPrefix + strings.ToUpper(strings.ReplaceAll(s.flag, "-", "_"))
}

func portSetting(flag, usage string, field func(*tproxy.Config) *uint16) tproxySetting {
	return tproxySetting{flag: flag, usage: usage, typ: "port", apply: func(c *tproxy.Config, v string) error {
		p, err := parsePort(v)
		if err != nil {
			return err
		}
		*field(c) = p
		return nil
	}}
}

func portsSetting(flag, usage string, field func(*tproxy.Config) *[]uint16) tproxySetting {
	return tproxySetting{flag: flag, usage: usage, typ: "ports", apply: func(c *tproxy.Config, v string) error {
		var out []uint16
		for _, s := range splitList(v) {
			p, err := parsePort(s)
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		*field(c) = out
		return nil
	}}
}

func prefixesSetting(flag, usage string, field func(*tproxy.Config) *[]netip.Prefix) tproxySetting {
	return tproxySetting{flag: flag, usage: usage, typ: "cidrs", apply: func(c *tproxy.Config, v string) error {
		var out []netip.Prefix
		for _, s := range splitList(v) {
			p, err := parsePrefix(s)
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		*field(c) = out
		return nil
	}}
}

func boolSetting(flag, usage string, field func(*tproxy.Config) *bool, invert bool) tproxySetting {
	return tproxySetting{flag: flag, usage: usage, isBool: true, apply: func(c *tproxy.Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(c) = b != invert
		return nil
	}}
}

func stringSetting(flag, usage string, field func(*tproxy.Config) *string) tproxySetting {
	return tproxySetting{flag: flag, usage: usage, apply: func(c *tproxy.Config, v string) error {
		*field(c) = strings.TrimSpace(v)
		return nil
	}}
}

var tproxySettings = []tproxySetting{
	portSetting("redirect-outbound-port", "port receiving outbound TCP (Envoy's outbound listener) (default 15001)", func(c *tproxy.Config) *uint16 { return &c.RedirectOutboundPort }),
	portSetting("redirect-inbound-port", "port receiving inbound TCP (Envoy's inbound listener) (default 15006)", func(c *tproxy.Config) *uint16 { return &c.RedirectInboundPort }),
	portSetting("redirect-dns-port", "port of the resolver receiving DNS, UDP and TCP (default 15053)", func(c *tproxy.Config) *uint16 { return &c.RedirectDNSPort }),
	boolSetting("redirect-dns", "redirect the applications' DNS (UDP and TCP port 53, any nameserver) to the resolver (default true)", func(c *tproxy.Config) *bool { return &c.RedirectDNS }, false),
	boolSetting("skip-dns-conntrack-zone-split", "do not split DNS into conntrack zones (kumahq/kuma#3459)", func(c *tproxy.Config) *bool { return &c.ConntrackZoneSplit }, true),
	stringSetting("kuma-dp-user", "user (name or UID) the agent and Envoy run as; its traffic is never redirected (default 5678)", func(c *tproxy.Config) *string { return &c.KumaDPUser }),
	portsSetting("exclude-inbound-ports", "inbound ports not redirected (comma list or repeated)", func(c *tproxy.Config) *[]uint16 { return &c.ExcludeInboundPorts }),
	portsSetting("exclude-outbound-ports", "outbound TCP ports not redirected (comma list or repeated)", func(c *tproxy.Config) *[]uint16 { return &c.ExcludeOutboundPorts }),
	prefixesSetting("exclude-outbound-ips", "outbound destinations (IPs or CIDRs) not redirected (comma list or repeated)", func(c *tproxy.Config) *[]netip.Prefix { return &c.ExcludeOutboundIPs }),
	{flag: "exclude-outbound-ports-for-uids", repeatable: true,
		usage: `"[tcp|udp|*:]ports:uids" not redirected, e.g. "tcp:80,443:1000-1010" (repeat the flag; ";" between entries in the environment)`,
		apply: func(c *tproxy.Config, v string) error {
			var out []string
			for _, s := range strings.Split(v, ";") {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
			c.ExcludeOutboundPortsForUIDs = out
			return nil
		}},
	stringSetting("ip-family-mode", "dualstack (IPv4 and IPv6 rules) or ipv4 (default dualstack)", func(c *tproxy.Config) *string { return &c.IPFamilyMode }),
	stringSetting("iptables-executables", "auto (the backend the host already uses), legacy or nft (default auto)", func(c *tproxy.Config) *string { return &c.Executables }),
	prefixesSetting("vip-ranges", "VIP ranges made routable when no route covers them (default 240.0.0.0/4,fd00:fd00::/64)", func(c *tproxy.Config) *[]netip.Prefix { return &c.VIPRanges }),
	stringSetting("state-file", "file remembering the routes and addresses install added (default /run/kuma-dp/tproxy-state.json)", func(c *tproxy.Config) *string { return &c.StateFile }),
	stringSetting("netns", "apply inside this named network namespace (ip netns), e.g. from a CNI or for tests", func(c *tproxy.Config) *string { return &c.NetNS }),
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return uint16(n), nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// rawFlag keeps a flag's text; repeated uses join with "," (or ";" for repeatable entries).
type rawFlag struct {
	val, sep, typ string
	isBool        bool
}

func (r *rawFlag) String() string { return r.val }
func (r *rawFlag) Type() string {
	switch {
	case r.isBool:
		return "bool"
	case r.typ != "":
		return r.typ
	}
	return "string"
}
func (r *rawFlag) IsBoolFlag() bool { return r.isBool }
func (r *rawFlag) Set(s string) error {
	if r.val != "" && r.sep != "" {
		r.val += r.sep + s
	} else {
		r.val = s
	}
	return nil
}

// loadTproxyConfig applies defaults < file < environment < flags. Errors name the source.
func loadTproxyConfig(fs *pflag.FlagSet, raws map[string]*rawFlag, file string, getenv func(string) string) (tproxy.Config, error) {
	c := tproxy.DefaultConfig()
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return c, fmt.Errorf("--config: %w", err)
		}
		if err := decodeTproxyFile(data, &c); err != nil {
			return c, fmt.Errorf("--config %s: %w", file, err)
		}
	}
	var errs []error
	failed := map[string]bool{} // flags whose value did not parse: the config keeps the earlier value
	for _, s := range tproxySettings {
		if v := getenv(s.env()); v != "" && !fs.Changed(s.flag) {
			if err := s.apply(&c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.env(), err))
				failed[s.flag] = true
			}
		}
		if fs.Changed(s.flag) {
			if err := s.apply(&c, raws[s.flag].val); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", s.flag, err))
				failed[s.flag] = true
			}
		}
	}
	// Then every validation error, except those about a setting that already failed to parse.
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

// decodeTproxyFile reads the YAML file over c, refusing unknown keys; bare addresses in the
// prefix lists are accepted as /32 or /128, like on the command line.
func decodeTproxyFile(data []byte, c *tproxy.Config) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return fmt.Errorf("want a mapping of settings: %w", err)
	}
	for _, key := range []string{"excludeOutboundIPs", "vipRanges"} {
		raw, ok := doc[key]
		if !ok {
			continue
		}
		var items []string
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s: want a list of IPs or CIDRs: %w", key, err)
		}
		for i, it := range items {
			p, err := parsePrefix(it)
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", key, i, err)
			}
			items[i] = p.String()
		}
		doc[key], _ = json.Marshal(items)
	}
	js, _ = json.Marshal(doc)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(c)
}

func runTproxy(args []string, stdout, stderr io.Writer) int {
	return runTproxyEnv(args, stdout, stderr, os.Getenv)
}

func runTproxyEnv(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := pflag.NewFlagSet("kuma-dp tproxy", pflag.ContinueOnError)
	raws := map[string]*rawFlag{}
	for _, s := range tproxySettings {
		r := &rawFlag{isBool: s.isBool, typ: s.typ}
		switch {
		case s.repeatable:
			r.sep = ";"
		case !s.isBool:
			r.sep = ","
		}
		raws[s.flag] = r
		f := fs.VarPF(r, s.flag, "", s.usage+" [$"+s.env()+"]")
		if s.isBool {
			f.NoOptDefVal = "true"
		}
	}
	configFile := fs.String("config", "", "YAML file with any setting (keys: docs/tproxy.md); environment and flags override it")
	dryRun := fs.Bool("dry-run", false, "print the rules, interfaces and routes; change nothing")
	logFormat := fs.String("log-format", "text", "text or json (logs go to stderr)")
	cmd := subcommand{name: "tproxy", fs: fs, stdout: stdout, stderr: stderr, usage: func(w io.Writer) {
		fmt.Fprintf(w, "Usage: kuma-dp tproxy install|uninstall|verify [flags]\n\n"+
			"install    redirect outbound TCP to Envoy's outbound port, inbound TCP to its inbound port and\n"+
			"           DNS (UDP and TCP 53) to the resolver: one iptables-restore per family; idempotent\n"+
			"uninstall  remove exactly what install added (rules tagged kuma-dp/, KUMA_MESH_ chains, routes)\n"+
			"verify     compare the live rules with the expected ones; exit 1 with the difference\n\n"+
			"Settings: defaults < --config FILE < %s* environment < flags.\n"+
			"Exit codes: 0 ok, 1 invalid input, failure or (verify) a difference, 2 usage.\n\nFlags:\n%s\n%s", tproxyEnvPrefix, fs.FlagUsages(), tproxyExample)
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
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		return usageErr("--log-format=%q: want text or json", *logFormat)
	}
	log := slog.New(handler)
	c, err := loadTproxyConfig(fs, raws, *configFile, getenv)
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
	}
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
