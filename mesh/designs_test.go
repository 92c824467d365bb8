package mesh

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDesignExamplesVerbatim decodes every YAML example of the designs as written
// (testdata/designs) and compares what became of each document with testdata/designs.golden.
func TestDesignExamplesVerbatim(t *testing.T) {
	var report strings.Builder
	ok := map[string]bool{}
	for _, design := range []string{"virtualoutbound", "virtualhost", "meshexternalservice", "trafficroute"} {
		data, err := os.ReadFile("../testdata/designs/" + design + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Decode(design, data)
		for _, r := range rs {
			ok[r.GetMeta().Source.String()] = true
			fmt.Fprintf(&report, "ok    %s %s %q\n", r.GetMeta().Source, r.Kind(), r.GetMeta().Name)
		}
		var es Errors
		if err != nil && !errors.As(err, &es) {
			t.Fatalf("%s: %v is not Errors", design, err)
		}
		for _, e := range es {
			fmt.Fprintf(&report, "error %s\n", e)
		}
	}
	// The chosen designs' examples must all decode.
	for _, src := range []string{"virtualoutbound#2", "virtualoutbound#3", "virtualoutbound#4", "virtualoutbound#5", "virtualhost#2", "virtualhost#3", "virtualhost#4", "virtualhost#5",
		"meshexternalservice#2", "meshexternalservice#3", "meshexternalservice#5", "meshexternalservice#6", "meshexternalservice#8", "meshexternalservice#11",
		"trafficroute#1", "trafficroute#2", "trafficroute#3", "trafficroute#4", "trafficroute#5", "trafficroute#6", "trafficroute#7", "trafficroute#8", "trafficroute#9", "trafficroute#10"} {
		if !ok[src] {
			t.Errorf("design example %s does not decode", src)
		}
	}
	checkGolden(t, "designs.golden", report.String())
}
