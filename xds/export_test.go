package xds

import (
	"fmt"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// Generate builds the Envoy resources of s.Self from the model and the VIP table with no
// memory of an earlier call (what a Generator's first call does), for the tests that compare
// with it. It is pure: same inputs, same resources (every slice sorted by name). Policies that cannot be
// expressed are left out and listed in Resources.Problems; the error is for unusable input
// (no dataplane).
func Generate(s *mesh.Snapshot, t *vipalloc.Table, o Options) (*Resources, error) {
	if s == nil || s.Self == nil {
		return nil, fmt.Errorf("xds: snapshot has no dataplane")
	}
	g := newGenerator(s, t, o.withDefaults())
	g.run() // no memory: nothing to memoize
	return g.finish(), nil
}
