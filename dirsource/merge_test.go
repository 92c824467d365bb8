package dirsource

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// When one run is much larger than the others, mergeByName gives what a stable sort by
// name of the runs one after another gives: the same resources (by pointer), names in
// order, those of one name in the order of their runs; otherwise the runs concatenated.
func TestMergeByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	merged := 0
	for round := range 300 {
		runs := make([][]mesh.Resource, 1+rng.IntN(5))
		n := 0
		for i := range runs {
			size := rng.IntN(8)
			if i == round%len(runs) {
				size = 40 + rng.IntN(200) // one large run, most rounds
			}
			for range size {
				// few distinct names: repeats within and across runs
				name := fmt.Sprintf("dp-%02d", rng.IntN(60))
				runs[i] = append(runs[i], &mesh.Dataplane{Meta: mesh.Meta{Name: name}})
			}
			slices.SortStableFunc(runs[i], byName)
			n += size
		}
		var want []mesh.Resource
		big := 0
		for i, r := range runs {
			want = append(want, r...)
			if len(r) > len(runs[big]) {
				big = i
			}
		}
		if n-len(runs[big]) <= len(runs[big])/8 { // merged; otherwise concatenated, for the snapshot to sort
			slices.SortStableFunc(want, byName)
			merged++
		}
		got := mergeByName(runs, n)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: runs %v\n got %v\nwant %v", round, names2(runs), namesOf(got), namesOf(want))
		}
	}
	if merged < 100 {
		t.Fatalf("only %d of 300 rounds took the merge", merged)
	}
}

func byName(a, b mesh.Resource) int { return strings.Compare(a.GetMeta().Name, b.GetMeta().Name) }

func namesOf(rs []mesh.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s@%p", r.GetMeta().Name, r))
	}
	return out
}

func names2(runs [][]mesh.Resource) [][]string {
	var out [][]string
	for _, r := range runs {
		out = append(out, namesOf(r))
	}
	return out
}
