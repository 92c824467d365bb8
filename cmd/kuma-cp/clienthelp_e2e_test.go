package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// The examples of `kuma-cp apply|get|delete --help`, run as written on the bundled files: etcd
// (a real one, on a free port instead of 2379), the admin token, the control plane on it (free
// ports instead of the defaults, so the client commands get --api-url), then every client
// command in order. Each must succeed, and what they print must show the resource the
// bundled file holds, then its deletion.
func TestClientHelpExamplesWork(t *testing.T) {
	var help bytes.Buffer
	if rc := dispatch([]string{"get", "--help"}, &help, &help); rc != exitOK {
		t.Fatalf("get --help: exit %d", rc)
	}
	text := help.String()
	i := strings.Index(text, "Examples")
	if i < 0 {
		t.Fatalf("no examples in get --help:\n%s", text)
	}
	text = text[i:]
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	fix := func(args []string) []string {
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "/tmp/cp", dir)
			if strings.HasPrefix(args[i], "testdata/") {
				args[i] = filepath.Join(root, args[i])
			}
		}
		return args
	}

	var etcdLine, tokenLine string
	for _, line := range strings.Split(text, "\n") {
		switch l := strings.TrimSpace(line); {
		case strings.HasPrefix(l, "etcd "):
			etcdLine = l
		case strings.HasPrefix(l, "head ") && strings.Contains(l, "admin.token"):
			tokenLine = l
		}
	}
	if etcdLine != "etcd --data-dir /tmp/cp/etcd &" || tokenLine == "" {
		t.Fatalf("the examples do not start etcd and write the admin token:\n%s", text)
	}
	c := etcdtest.Start(t, 1) // etcd as the example starts it, on a free port
	if out, err := exec.Command("sh", "-c", strings.ReplaceAll(tokenLine, "/tmp/cp", dir)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", tokenLine, err, out)
	}

	cmds := helpCommands(text, "kuma-cp")
	var api string
	seen := map[string]bool{}
	for _, args := range cmds {
		args = fix(args)
		if args[1] == "serve" {
			if args[len(args)-1] != "&" {
				t.Fatalf("the serve example does not run in the background: %v", args)
			}
			args = args[1 : len(args)-1]
			for i := range args {
				if args[i] == "--etcd-endpoints" && args[i+1] == "http://127.0.0.1:2379" {
					args[i+1] = strings.Join(c.Endpoints(), ",")
				}
			}
			cpBin, _ := binaries(t)
			ready := filepath.Join(dir, "ready.json")
			p := startProc(t, "kuma-cp", cpBin, append(args, "--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0",
				"--metrics-address", "127.0.0.1:0", "--ready-file", ready)...)
			var r struct{ API string }
			p.readyJSON(ready, &r)
			api = r.API
			continue
		}
		if api == "" {
			t.Fatalf("%v comes before the control plane is started", args)
		}
		var out, errb bytes.Buffer
		if rc := dispatch(append(args[1:], "--api-url", "http://"+api), &out, &errb); rc != exitOK {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), rc, errb.String())
		}
		key := strings.Join(args[1:3], " ")
		switch {
		case key == "get virtualoutbounds" && len(args) == 3 && !seen["delete"]:
			if !strings.Contains(out.String(), "kuma-versioned") {
				t.Errorf("get virtualoutbounds after apply does not list kuma-versioned:\n%s", out.String())
			}
		case key == "get virtualoutbounds" && len(args) > 3:
			if !strings.Contains(out.String(), "name: kuma-versioned") {
				t.Errorf("get -o yaml does not show the resource:\n%s", out.String())
			}
		}
		seen[args[1]] = true
	}
	for _, c := range []string{"apply", "get", "delete"} {
		if !seen[c] {
			t.Errorf("the examples have no %s", c)
		}
	}
	var out, errb bytes.Buffer
	dispatch([]string{"get", "virtualoutbounds", "--api-url", "http://" + api}, &out, &errb)
	if strings.Contains(out.String(), "kuma-versioned ") {
		t.Errorf("the example's delete left the resource:\n%s", out.String())
	}
}
