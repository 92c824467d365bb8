package xds

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

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
	testutil.Golden(t, filepath.Join("testdata", name+".golden.json"), got)
}
