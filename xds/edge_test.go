package xds

import (
	"math"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// generateValid generates and validates; a refused set would keep Envoy on its old config.
func generateValid(t *testing.T, self *mesh.Dataplane, res []mesh.Resource, opts Options) *Resources {
	t.Helper()
	s, err := mesh.NewSnapshot(self, res)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Generate(s, defaultTable(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("generated resources do not validate:\n%v", err)
	}
	return r
}

// Weights are uint32 each; their sums (two destinations with the same tags, or '*' and the
// service itself) wrapped around: 2^31 + 2^31 became a weight of 0, which Envoy refuses, and
// the whole update with it.
func TestRouteWeightsBeyondUint32(t *testing.T) {
	const half = 1 << 31
	for _, tc := range []struct {
		name string
		conf []mesh.WeightedDestination
		want []string
	}{
		{"same-tags", []mesh.WeightedDestination{to(half, tags("service", "backend", "version", "2")), to(half, tags("service", "backend", "version", "2")), to(half, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:2863311528", "backend{version=3}:1431655764"}},
		{"wildcard-and-service", []mesh.WeightedDestination{to(half, tags("service", "*")), to(half, tags("service", "backend"))},
			[]string{"backend:4294967294"}},
		{"each-max", []mesh.WeightedDestination{to(math.MaxUint32, tags("service", "backend", "version", "2")), to(math.MaxUint32, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:2147483646", "backend{version=3}:2147483646"}},
		{"tiny-beside-huge", []mesh.WeightedDestination{to(math.MaxUint32, tags("service", "backend", "version", "2")), to(1, tags("service", "backend", "version", "3")), to(5, tags("service", "db"))},
			[]string{"backend{version=2}:4294967286", "backend{version=3}:1", "db:4"}},
		{"within-limits-unchanged", []mesh.WeightedDestination{to(math.MaxUint32-1, tags("service", "backend", "version", "2")), to(1, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:4294967294", "backend{version=3}:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := generateValid(t, mobile(tags("service", "mobile")), append(backends(),
				trafficRoute("big", 0, tags("service", "mobile"), tags("service", "backend"), tc.conf...)), tproxy)
			got := splitOf(t, r, "outbound:240.0.0.1:80")
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("split = %v, want %v", got, tc.want)
			}
			var sum uint64
			for _, w := range got {
				var n uint64
				for _, c := range w[strings.LastIndexByte(w, ':')+1:] {
					n = n*10 + uint64(c-'0')
				}
				sum += n
			}
			if sum > math.MaxUint32 {
				t.Errorf("weights sum to %d, above Envoy's uint32", sum)
			}
		})
	}
}
