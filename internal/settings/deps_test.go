package settings

import (
	"os/exec"
	"strings"
	"testing"
)

// settings sits below every command it configures: it links none of the product's packages
// (the model, the agent's parts, the control plane), only the shared internal ones, so that
// any of them can read its config with it.
func TestSettingsImportsOnlyInternalPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v", err)
	}
	const module = "github.com/kumadp/kuma-dp/"
	self := false
	for _, dep := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(dep, module)
		switch {
		case !ok:
		case rest == "internal/settings":
			self = true
		case !strings.HasPrefix(rest, "internal/"):
			t.Errorf("internal/settings depends on the product's package %s", dep)
		}
	}
	if !self {
		t.Fatalf("go list -deps did not name internal/settings itself: %s", out)
	}
}
