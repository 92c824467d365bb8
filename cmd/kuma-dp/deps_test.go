package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent runs in every pod: its binary must not link the control plane. The packages the
// two share (mesh, hostname, tagset, authdns, ...) live outside cp/.
func TestAgentImportsNoControlPlanePackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v", err)
	}
	n := 0
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, "github.com/kumadp/kuma-dp/") {
			continue
		}
		n++
		if strings.HasPrefix(dep, "github.com/kumadp/kuma-dp/cp/") || strings.HasPrefix(dep, "github.com/kumadp/kuma-dp/cmd/kuma-cp") {
			t.Errorf("kuma-dp depends on the control plane's package %s", dep)
		}
	}
	if n < 5 {
		t.Fatalf("go list -deps named only %d of the project's packages: %s", n, out)
	}
}
