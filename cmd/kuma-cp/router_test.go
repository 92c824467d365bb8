package main

import (
	"bytes"
	"strings"
	"testing"
)

// router install's usage errors, before any request: each names the flag or argument and
// the value, exit 2.
func TestRouterInstallUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"router"}, "want: router install NAME"},
		{[]string{"router", "uninstall", "shard-a"}, "want: router install NAME"},
		{[]string{"router", "install"}, "want one router's name, got 0 arguments"},
		{[]string{"router", "install", "shard-a", "-o", "helm"}, `-o "helm": want yaml, systemd or dataplanes`},
		{[]string{"router", "install", "shard-a", "-o", "systemd"}, "-o systemd writes files: give --out-dir"},
		{[]string{"router", "install", "shard-a", "--api-url", "ftp://x"}, "ftp://x"},
	} {
		var out, errb bytes.Buffer
		if rc := dispatch(c.args, &out, &errb); rc != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, rc, errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if rc := dispatch([]string{"router", "install", "--help"}, &out, &errb); rc != exitOK || !strings.Contains(out.String(), "--address") || !strings.Contains(out.String(), "kubectl apply -f -") {
		t.Errorf("--help: exit %d\n%s", rc, out.String())
	}
}
