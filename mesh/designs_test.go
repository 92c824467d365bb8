package mesh

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSeedsVerbatim decodes every YAML example of the seeds as written (testdata/seeds) and
// compares what became of each document with testdata/seeds.golden.
func TestSeedsVerbatim(t *testing.T) {
	var report strings.Builder
	ok := map[string]bool{}
	for _, seed := range []string{"000", "001", "002", "004"} {
		data, err := os.ReadFile("../testdata/seeds/" + seed + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Decode(seed, data)
		for _, r := range rs {
			ok[r.GetMeta().Source] = true
			fmt.Fprintf(&report, "ok    %s %s %q\n", r.GetMeta().Source, r.Kind(), r.GetMeta().Name)
		}
		var es Errors
		if err != nil && !errors.As(err, &es) {
			t.Fatalf("%s: %v is not Errors", seed, err)
		}
		for _, e := range es {
			fmt.Fprintf(&report, "error %s\n", e)
		}
	}
	// The chosen designs' examples must all decode.
	for _, src := range []string{"000#2", "000#3", "000#4", "000#5", "001#2", "001#3", "001#4", "001#5",
		"002#2", "002#3", "002#5", "002#6", "002#8", "002#11",
		"004#1", "004#2", "004#3", "004#4", "004#5", "004#6", "004#7", "004#8", "004#9", "004#10"} {
		if !ok[src] {
			t.Errorf("seed example %s does not decode", src)
		}
	}
	checkGolden(t, "seeds.golden", report.String())
}
