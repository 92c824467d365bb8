package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// The examples of `kuma-cp describe --help` and `kuma-cp zones --help`, run as written on the
// bundled router shard (testdata/routes/shard-a.yaml): a real etcd (a free port instead of
// 2379), the control plane on it, then each example line. The route is scheduled onto the
// shard, describe shows its final name and the router's route, zones prints the shard's zone.
func TestRouteHelpExamplesWork(t *testing.T) {
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	c := etcdtest.Start(t, 1)
	endpoints := strings.Join(c.Endpoints(), ",")
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cpBin, _ := binaries(t)
	ready := filepath.Join(dir, "ready.json")
	var r struct{ API string }
	startProc(t, "kuma-cp", cpBin, "serve", "--store", "etcd", "--etcd-endpoints", endpoints,
		"--admin-token-file", filepath.Join(dir, "admin.token"), "--address", "127.0.0.1:0",
		"--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--ready-file", ready).readyJSON(ready, &r)

	run := func(cmd string) map[string]string {
		var help bytes.Buffer
		dispatch([]string{cmd, "--help"}, &help, &help)
		text := help.String()[strings.Index(help.String(), "Example"):]
		outs := map[string]string{}
		for _, args := range helpCommands(text, "kuma-cp") {
			line := strings.Join(args, " ")
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "/tmp/cp", dir)
				args[i] = strings.ReplaceAll(args[i], "http://127.0.0.1:2379", endpoints)
				if strings.HasPrefix(args[i], "testdata/") {
					args[i] = filepath.Join(root, args[i])
				}
			}
			if args[1] != "zones" {
				args = append(args, "--api-url", "http://"+r.API)
			}
			var out, errb bytes.Buffer
			if rc := dispatch(args[1:], &out, &errb); rc != exitOK {
				t.Fatalf("%s: exit %d: %s", line, rc, errb.String())
			}
			outs[line] = out.String()
		}
		return outs
	}
	want := map[string]string{
		"kuma-cp apply --wait -f testdata/routes/shard-a.yaml --admin-token-file /tmp/cp/admin.token": "route web.shop scheduled on router shard-a: shop-www.shard-a.apps.example.com",
		"kuma-cp describe route web -n shop":                           "shop-www.shard-a.apps.example.com",
		"kuma-cp describe router shard-a":                              "shop/web",
		"kuma-cp describe meshexternalservice ext-svc":                 "k8s-meshext-hostnames\text-svc.svc.meshext.local",
		"kuma-cp zones --etcd-endpoints http://127.0.0.1:2379":         "$ORIGIN shard-a.apps.example.com.",
		"kuma-cp zones --etcd-endpoints http://127.0.0.1:2379 -o json": `"shard-a.apps.example.com.`,
	}
	outs := run("describe")
	for line, out := range run("zones") {
		outs[line] = out
	}
	for line, w := range want {
		out, ok := outs[line]
		if !ok {
			t.Errorf("the help has no example %q", line)
		} else if !strings.Contains(out, w) {
			t.Errorf("%s: the output lacks %q:\n%s", line, w, out)
		}
	}
}
