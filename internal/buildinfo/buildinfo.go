// Package buildinfo is the build's version, for kuma-dp's and kuma-cp's `version` commands
// and their `<prefix>_build_info` metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set at build time (make build, make build-cp, the Dockerfile):
//
//	-ldflags "-X github.com/kumadp/kuma-dp/internal/buildinfo.Version=v1.2.3"
var Version = "dev"

// Revision is the VCS revision Go stamped into the binary ("" when it built none: go run,
// a build outside a checkout), "-dirty" appended for a modified tree.
var Revision = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
})

// String is the version line of a `version` command: "kuma-cp v1.2.3 (revision abc, go1.26)".
func String(program string) string {
	s := program + " " + Version + " ("
	if r := Revision(); r != "" {
		s += "revision " + r + ", "
	}
	return s + runtime.Version() + ")"
}

// Collector is the gauge <prefix>_build_info, always 1, labelled with version, revision and
// goversion, as Prometheus' own exporters publish theirs.
func Collector(prefix string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        prefix + "_build_info",
		Help:        "1, labelled with the build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": Version, "revision": Revision(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
