package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cp/api"
)

const configExample = `Examples (as kumactl's; the file is kuma-cp/config.yaml under ~/.config, mode 0600, or $KUMA_CP_CONFIG):
  kuma-cp config control-planes add --name local --address http://127.0.0.1:5681 --admin-token-file /tmp/cp/admin.token
  kuma-cp config control-planes list
  kuma-cp config control-planes switch --name local
  kuma-cp get virtualoutbounds          # the current control plane's API and token, no flags
  kuma-cp config control-planes remove --name local
`

const configUsage = "Usage:\n  kuma-cp config control-planes add --name NAME --address URL [--admin-token-file F] [--overwrite]\n" +
	"  kuma-cp config control-planes switch --name NAME\n  kuma-cp config control-planes list\n" +
	"  kuma-cp config control-planes remove --name NAME\n\n" + configExample

// ConfigCommand is `kuma-cp config control-planes add|switch|list|remove`: the client
// configuration of the API commands (Config).
func ConfigCommand(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kuma-cp config: %s\nRun 'kuma-cp config --help' for the commands.\n", fmt.Sprintf(format, a...))
		return ExitUsage
	}
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprint(stdout, configUsage)
		return ExitOK
	}
	if len(args) < 2 || args[0] != "control-planes" {
		return usage("want: config control-planes add|switch|list|remove")
	}
	verb := args[1]
	name := "config control-planes " + verb
	f, ok := newConfigFlags(name, verb)
	if !ok {
		return usage("%q: want add, switch, list or remove", verb)
	}
	if rc, done := Parse(name, f.fs, args[2:], false, "", stdout, stderr); done {
		return rc
	}
	path, err := ConfigPath(getenv)
	if err != nil {
		return usage("%v", err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp %s: %v\n", name, err)
		return ExitFail
	}
	if verb == "list" {
		listControlPlanes(stdout, cfg)
		return ExitOK
	}
	if f.name == "" {
		return usage("%s: --name is required", verb)
	}
	msg, err := f.edit(verb, cfg)
	if msg != "" {
		return usage("%s", msg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp %s: %v\n", name, err)
		return ExitFail
	}
	if err := cfg.Save(path); err != nil {
		fmt.Fprintf(stderr, "kuma-cp %s: %s: %v\n", name, path, err)
		return ExitFail
	}
	fmt.Fprintln(stdout, f.done(verb))
	return ExitOK
}

// configFlags are the flags of a control-planes verb.
type configFlags struct {
	fs                       *pflag.FlagSet
	name, address, tokenFile string
	overwrite                bool
}

// newConfigFlags binds verb's flags; false for an unknown verb.
func newConfigFlags(name, verb string) (*configFlags, bool) {
	f := &configFlags{fs: pflag.NewFlagSet(name, pflag.ContinueOnError)}
	f.fs.StringVar(&f.name, "name", "", "the control plane's name")
	switch verb {
	case "add":
		f.fs.StringVar(&f.address, "address", "", "its API, http(s)://HOST:PORT (kuma-cp serve --api-address)")
		f.fs.StringVar(&f.tokenFile, "admin-token-file", "", "file holding its admin token (kept in the configuration, mode 0600)")
		f.fs.BoolVar(&f.overwrite, "overwrite", false, "replace a control plane of that name")
	case "list":
		f.fs.MarkHidden("name")
	case "switch", "remove":
	default:
		return nil, false
	}
	return f, true
}

// listControlPlanes prints the control planes configured, the current one starred.
func listControlPlanes(stdout io.Writer, cfg *Config) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTIVE\tNAME\tADDRESS")
	for _, cp := range cfg.ControlPlanes {
		active := ""
		if cp.Name == cfg.CurrentContext {
			active = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", active, cp.Name, cp.URL)
	}
	tw.Flush()
}

// edit applies add, switch or remove to cfg: a usage error's message when a flag's value is
// refused, else the configuration's error.
func (f *configFlags) edit(verb string, cfg *Config) (usage string, err error) {
	switch verb {
	case "add":
		if err := api.CheckURL(f.address); err != nil {
			return strings.Replace(err.Error(), "--api-url", "--address", 1), nil
		}
		cp := ControlPlane{Name: f.name, URL: f.address}
		if f.tokenFile != "" {
			if cp.AdminToken, err = ReadToken(f.tokenFile); err != nil {
				return err.Error(), nil
			}
		}
		return "", cfg.Add(cp, f.overwrite)
	case "switch":
		return "", cfg.Switch(f.name)
	}
	return "", cfg.Remove(f.name)
}

// done is what a verb that changed the configuration prints.
func (f *configFlags) done(verb string) string {
	switch verb {
	case "add":
		return fmt.Sprintf("added control plane %q (%s), now the current one", f.name, f.address)
	case "switch":
		return fmt.Sprintf("switched to control plane %q", f.name)
	}
	return fmt.Sprintf("removed control plane %q", f.name)
}
