package xds

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenJSON renders resources as stable, indented JSON: protojson for each resource (Envoy's
// own field names), then re-encoded by encoding/json so whitespace and key order are fixed.
func goldenJSON(t testing.TB, r *Resources) []byte {
	t.Helper()
	enc := func(ms []proto.Message) []any {
		out := make([]any, 0, len(ms))
		for _, m := range ms {
			b, err := protojson.Marshal(m)
			if err != nil {
				t.Fatalf("protojson: %v", err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	doc := map[string]any{
		"listeners": enc(asMessages(r.Listeners)),
		"clusters":  enc(asMessages(r.Clusters)),
		"endpoints": enc(asMessages(r.Endpoints)),
	}
	if len(r.Secrets) > 0 {
		doc["secrets"] = enc(asMessages(r.Secrets))
	}
	var probs []string
	for _, p := range r.Problems {
		probs = append(probs, p.String())
	}
	if len(probs) > 0 {
		doc["problems"] = probs
	}
	if len(r.Conflicts) > 0 {
		doc["conflicts"] = r.Conflicts
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func asMessages[T proto.Message](in []T) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

// checkGolden compares got with testdata/<name>.golden.json, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./xds -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generated resources; review the diff and rerun with -update if intended:\n%s", path, firstDiff(want, got))
	}
}

func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return "line " + itoa(i+1) + ":\n  want: " + string(w) + "\n  got:  " + string(g)
		}
	}
	return ""
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
