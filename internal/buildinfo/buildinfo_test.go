package buildinfo

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// <prefix>_build_info is 1, labelled with the version set at build time.
func TestCollector(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v9.9.9"
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector("kuma_cp"))
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "kuma_cp_build_info" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gathered %v %v", mfs, err)
	}
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "v9.9.9" || !strings.HasPrefix(labels["goversion"], "go") {
		t.Errorf("labels %v", labels)
	}
	if s := String("kuma-cp"); !strings.HasPrefix(s, "kuma-cp v9.9.9 (") {
		t.Errorf("String: %q", s)
	}
}

// make build and make build-cp both stamp the version into this package's Version (make
// build-cp stamped none: kuma-cp had no version).
func TestMakeStampsBothBinaries(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "build-cp", "VERSION=v9.9.9-test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build-cp: %v\n%s", err, out)
	}
	stamp := "-X github.com/kumadp/kuma-dp/internal/buildinfo.Version=v9.9.9-test"
	built := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, bin := range []string{"./cmd/kuma-dp", "./cmd/kuma-cp"} {
			if strings.Contains(line, " build ") && strings.HasSuffix(strings.TrimSpace(line), bin) {
				built[bin] = strings.Contains(line, stamp)
			}
		}
	}
	if len(built) != 2 || !built["./cmd/kuma-dp"] || !built["./cmd/kuma-cp"] {
		t.Errorf("make build-cp: stamped %v, want both binaries with %s:\n%s", built, stamp, out)
	}
}
