package cplink

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/mesh"
)

// encodeViaJSONToYAML is how resources were encoded before: the resource's JSON, its fields
// with the type put in, written as YAML by sigs.k8s.io/yaml (a YAML parse of the JSON, then
// go-yaml's writer). EncodeResource must give the same bytes: a resource's version on the
// link is a hash of them, and agents resume across an upgrade without a resend.
func encodeViaJSONToYAML(t testing.TB, r mesh.Resource) []byte {
	t.Helper()
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	fields["type"], _ = json.Marshal(r.Kind())
	canonical, _ := json.Marshal(fields)
	out, err := yaml.JSONToYAML(canonical)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every resource of the bundled files (the example mesh, the designs' examples, Kuma's and
// Kuma 2's, the routes), and resources whose values look like other YAML types (numbers,
// booleans, nulls, dates, keys and comments), encode as JSONToYAML encoded them, byte for
// byte.
func TestEncodeResourceAsJSONToYAML(t *testing.T) {
	var resources []mesh.Resource
	err := filepath.WalkDir("../testdata", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(path, "invalid") || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".json")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rs, err := mesh.Decode(path, data)
		if err == nil {
			resources = append(resources, rs...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	odd := []string{"yes", "no", "on", "true", "null", "~", "1", "1.5", "0x10", "1e3", "-0", "0.0", ".5", "+1",
		"2001-12-14", "12:30", "5d8f9c", "5e3", "0x1F", "0o17", "017", "1_000", "10.0.0.1", "1.2.3", "Y", "NULL", "Off", ".inf", "v1_2", "a: b", "#x", "x #y", " lead", "trail ", "it's", `say "hi"`, "ü", "-", "[x]", "{x}", "*a", "&a", "!t", "%p", "@x", "`x", "a\tb", "line\nbreak", ""}
	for i, v := range odd {
		doc, _ := json.Marshal(map[string]any{"type": "Dataplane", "mesh": "default", "name": "odd-" + strings.Repeat("x", i),
			"networking": map[string]any{"address": "10.0.0.1", "inbound": []any{map[string]any{"port": 8080 + i,
				"tags": map[string]string{"kuma.io/service": "web", "v": v, "k8s.io/" + strings.Repeat("a", i%3): v}}}}})
		rs, err := mesh.Decode("odd", doc)
		if err != nil {
			continue // a value the validation refuses is never encoded
		}
		resources = append(resources, rs...)
	}
	if len(resources) < 100 {
		t.Fatalf("only %d resources read from testdata", len(resources))
	}
	fast := 0
	for _, r := range resources {
		for _, created := range []time.Time{{}, time.Date(2026, 11, 28, 8, 0, 0, 123, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))} {
			if !created.IsZero() {
				r.GetMeta().SetCreationTime(created) // as the feed sets the store's
			}
			got, err := EncodeResource(r)
			if err != nil {
				t.Fatalf("%s %s: %v", r.Kind(), r.GetMeta().Name, err)
			}
			if want := encodeViaJSONToYAML(t, r); string(got) != string(want) {
				t.Errorf("%s %s encodes as\n%s\nwant (JSONToYAML)\n%s", r.Kind(), r.GetMeta().Name, got, want)
			}
			if writtenByHand(t, r) {
				fast++
			}
		}
	}
	t.Logf("%d encodings compared, %d written by appendBlockYAML", 3*len(resources), fast)
	if fast < len(resources) {
		t.Errorf("only %d of %d encodings written by appendBlockYAML: the comparison hardly tests it", fast, 3*len(resources))
	}
}

// writtenByHand reports whether EncodeResource's tree of r is written by appendBlockYAML.
func writtenByHand(t *testing.T, r mesh.Resource) bool {
	body, _ := json.Marshal(r)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		t.Fatal(err)
	}
	fields["type"] = r.Kind()
	yamlTyped(fields)
	_, ok := appendBlockYAML(nil, fields)
	return ok
}

// The usual Dataplane (store-set times, tags with digits in their keys) is written by hand.
func TestBlockYAMLWritesTheUsualDataplane(t *testing.T) {
	rs, err := mesh.Decode("dp", []byte("type: Dataplane\nmesh: default\nname: web-1.shop\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web_shop_svc_8080\n      k8s.kuma.io/namespace: shop\n      version: v1\n      pod-template-hash: 5d8f9c\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs[0].GetMeta().SetCreationTime(time.Now())
	if !writtenByHand(t, rs[0]) {
		t.Fatal("go-yaml writes it")
	}
	if got, _ := EncodeResource(rs[0]); string(got) != string(encodeViaJSONToYAML(t, rs[0])) {
		t.Fatalf("encodes as\n%s\nwant\n%s", got, encodeViaJSONToYAML(t, rs[0]))
	}
}

// BenchmarkEncodeResource: one Dataplane encoded for the link, beside the JSONToYAML path it
// replaces.
//
//	go test ./cplink -run '^$' -bench EncodeResource -benchmem
func BenchmarkEncodeResource(b *testing.B) {
	rs, err := mesh.Decode("dp", []byte("type: Dataplane\nmesh: default\nname: dp-1\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web\n      version: v1\n"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Direct", func(b *testing.B) {
		for range b.N {
			if _, err := EncodeResource(rs[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ViaJSONToYAML", func(b *testing.B) {
		for range b.N {
			encodeViaJSONToYAML(b, rs[0])
		}
	})
}
