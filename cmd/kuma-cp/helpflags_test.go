package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/cli"
)

// Each command's --help lists its own flags only (get --help listed -f, --wait and
// --timeout, which get then refused), and a default is printed once.
func TestHelpListsOwnFlagsOnly(t *testing.T) {
	for cmd, own := range map[string][]string{
		"apply":    {"--filename", "--wait", "--timeout", "--api-url", "--admin-token-file"},
		"get":      {"--output", "--mesh", "--namespace", "--api-url"},
		"delete":   {"--mesh", "--namespace", "--admin-token-file"},
		"describe": {"--mesh", "--namespace"},
		"inspect":  {"--mesh", "--output"},
	} {
		var out, errb bytes.Buffer
		if rc := dispatch([]string{cmd, "--help"}, &out, &errb); rc != exitOK {
			t.Fatalf("%s --help: exit %d %s", cmd, rc, errb.String())
		}
		flags, _, _ := strings.Cut(out.String(), "Example") // the flags, not the examples
		for f, cmds := range cli.FlagCommands {
			listed := strings.Contains(flags, "--"+f+" ")
			mine := false
			for _, c := range cmds {
				mine = mine || c == cmd
			}
			if listed != mine {
				t.Errorf("%s --help lists --%s: %v, want %v", cmd, f, listed, mine)
			}
		}
		for _, f := range own {
			if !strings.Contains(flags, f+" ") {
				t.Errorf("%s --help lacks %s", cmd, f)
			}
		}
	}
	var out bytes.Buffer
	dispatch([]string{"serve", "--help"}, &out, &out)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "--max-connections ") && strings.Count(line, "default") != 1 {
			t.Errorf("serve --help prints --max-connections' default %d times: %s", strings.Count(line, "default"), line)
		}
	}
}

// Standard input is named STDIN in apply's errors, not "-#2".
func TestApplyNamesStandardInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func(in *os.File) { os.Stdin = in }(os.Stdin)
	os.Stdin = r
	go func() {
		w.WriteString("type: Dataplane\nname: a\nmesh: default\nnetworking: {address: 10.0.0.1, inbound: [{port: 80, tags: {kuma.io/service: a}}]}\n---\ntype: Dataplane\nname: b\n")
		w.Close()
	}()
	var out, errb bytes.Buffer
	rc := dispatch([]string{"apply", "-f", "-", "--api-url", "http://127.0.0.1:1"}, &out, &errb)
	if rc != exitFail || !strings.Contains(errb.String(), "STDIN#2") || strings.Contains(errb.String(), "-#2") {
		t.Errorf("apply -f - of an invalid second document: exit %d\n%s%s", rc, out.String(), errb.String())
	}
}
