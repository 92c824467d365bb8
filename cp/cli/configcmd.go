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

// ConfigCommand is `kuma-cp config control-planes add|switch|list|remove`: the client
// configuration of the API commands (Config).
func ConfigCommand(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kuma-cp config: %s\nRun 'kuma-cp config --help' for the commands.\n", fmt.Sprintf(format, a...))
		return ExitUsage
	}
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
		if len(args) == 0 {
			return usage("want: config control-planes add|switch|list|remove")
		}
		fmt.Fprint(stdout, "Usage:\n  kuma-cp config control-planes add --name NAME --address URL [--admin-token-file F] [--overwrite]\n"+
			"  kuma-cp config control-planes switch --name NAME\n  kuma-cp config control-planes list\n"+
			"  kuma-cp config control-planes remove --name NAME\n\n"+configExample)
		return ExitOK
	}
	if args[0] != "control-planes" || len(args) < 2 {
		return usage("want: config control-planes add|switch|list|remove")
	}
	verb := args[1]
	name := "config control-planes " + verb
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	cpName := fs.String("name", "", "the control plane's name")
	var address, tokenFile *string
	var overwrite *bool
	switch verb {
	case "add":
		address = fs.String("address", "", "its API, http(s)://HOST:PORT (kuma-cp serve --api-address)")
		tokenFile = fs.String("admin-token-file", "", "file holding its admin token (kept in the configuration, mode 0600)")
		overwrite = fs.Bool("overwrite", false, "replace a control plane of that name")
	case "switch", "remove", "list":
	default:
		return usage("%q: want add, switch, list or remove", verb)
	}
	if verb == "list" {
		fs.MarkHidden("name")
	}
	if rc, done := Parse(name, fs, args[2:], false, "", stdout, stderr); done {
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
	if verb != "list" && *cpName == "" {
		return usage("%s: --name is required", verb)
	}
	switch verb {
	case "list":
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
		return ExitOK
	case "add":
		if err := api.CheckURL(*address); err != nil {
			return usage("%s", strings.Replace(err.Error(), "--api-url", "--address", 1))
		}
		cp := ControlPlane{Name: *cpName, URL: *address}
		if *tokenFile != "" {
			if cp.AdminToken, err = ReadToken(*tokenFile); err != nil {
				return usage("%v", err)
			}
		}
		err = cfg.Add(cp, *overwrite)
	case "switch":
		err = cfg.Switch(*cpName)
	case "remove":
		err = cfg.Remove(*cpName)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kuma-cp %s: %v\n", name, err)
		return ExitFail
	}
	if err := cfg.Save(path); err != nil {
		fmt.Fprintf(stderr, "kuma-cp %s: %s: %v\n", name, path, err)
		return ExitFail
	}
	switch verb {
	case "add":
		fmt.Fprintf(stdout, "added control plane %q (%s), now the current one\n", *cpName, *address)
	case "switch":
		fmt.Fprintf(stdout, "switched to control plane %q\n", *cpName)
	default:
		fmt.Fprintf(stdout, "removed control plane %q\n", *cpName)
	}
	return ExitOK
}
