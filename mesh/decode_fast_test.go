package mesh

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
)

// sameAsSlow checks that when the fast path accepts a document, it gives exactly the nodes
// of the sigs.k8s.io/yaml path; it reports whether the fast path took it.
func sameAsSlow(t testing.TB, text []byte) bool {
	t.Helper()
	text = quoteTemplates(text)
	n, ok := fastParse(text)
	if !ok {
		return false
	}
	want, err := parseDocumentSlow(text)
	if err != nil {
		t.Fatalf("fast path accepted a document the YAML library refuses (%v):\n%s", err, text)
	}
	got := []any{n}
	if list, isList := n.([]any); isList {
		got = list
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path differs:\n%s\nfast: %#v\nslow: %#v", text, got, want)
	}
	return true
}

// eachTestdataDocument calls f with every document of every resource file under roots.
func eachTestdataDocument(t *testing.T, roots []string, f func(path string, doc document)) {
	t.Helper()
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !isResourceFile(path) {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range splitDocuments(data) {
				f(path, doc)
			}
			return nil
		})
	}
}

func TestFastParseCases(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  string
		fast bool // the fast path is expected to take it
	}{
		{"dataplane", "type: Dataplane\nmesh: default\nname: a\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: a\n        version: v1\n", true},
		{"compact sequence", "a:\n- x\n- w: 1\n  z: 2\nb: c\n", true},
		{"nested sequence", "a:\n  - - 1\n    - 2\n  -\n  - # nothing\n  - q\n", true},
		{"quoted", "'k''q': 'it''s'\n\"d\": \"x y\" # c\ne: ''\nf: \"\"\n", true},
		{"comments and blanks", "# head\n\na: 1 # one\n  # indented comment\nb: x#y\n", true},
		{"words", "a: yes\nb: Off\nc: ~\nd: null\ne: TRUE\nf: n\ng: nope\nh:\n", true},
		{"numbers", "a: 0\nb: -12\nc: 123456789012345678\nd: 10.1.2.3\ne: 1.2.3\nf: -x\ng: +\n", true},
		{"empty collections", "a: {}\nb: []\nc: {} # c\nd: [ ]\n", true},
		{"flow mapping", "tags: {kuma.io/service: backend, region: us-east-1}\nm: {a: 1 , b: yes,c: ~}\n", true},
		{"flow sequence", "a: [x, 1, -2, no]\n", true},
		{"flow nested", "a: {b: [1]}\n", false},
		{"flow quoted", "a: {b: 'x'}\n", false},
		{"flow trailing comma", "a: [1, ]\n", false},
		{"flow no value", "a: {b}\n", false},
		{"flow colon", "a: {b: c:d}\n", false},
		{"flow float", "a: [1.5]\n", false},
		{"colons", "a: b:c\nhttp://x: y\nk : v\n", true},
		{"braces in plain", "host: v{{ .version }}.mesh\nx: a,b[c]\n", true},
		{"template quoted", "template: {{ name }}.svc.meshext.local\n", true},
		{"top-level list", "- type: Dataplane\n  name: a\n- type: Dataplane\n  name: b\n", true},
		{"float", "a: 1.0\n", false},
		{"leading zero", "a: 010\n", false},
		{"hex", "a: 0x10\n", false},
		{"plus", "a: +5\n", false},
		{"minus zero", "a: -0\n", false},
		{"underscore", "a: 1_000\n", false},
		{"big", "a: 1234567890123456789\n", false},
		{"timestamp", "a: 2024-01-02T15:04:05Z\n", false},
		{"inf", "a: .inf\nb: -.Inf\n", false},
		{"bool key", "yes: 1\n", false},
		{"int key", "80: a\n", false},
		{"merge", "<<: {}\n", false},
		{"json", "{\"a\": 1}\n", false},
		{"block scalar", "a: |\n  x\n", false},
		{"folded", "a: >\n  x\n", false},
		{"multi-line plain", "a: b\n  c\n", false},
		{"multi-line item", "- b\n  c\n", false},
		{"multi-line quoted", "a: 'b\n  c'\n", false},
		{"escape", "a: \"x\\ny\"\n", false},
		{"anchor", "a: &x 1\nb: *x\n", false},
		{"tag", "a: !!str 1\n", false},
		{"tab", "a:\tb\n", false},
		{"crlf", "a: b\r\n", false},
		{"non-ascii", "a: \u00e9\n", false},
		{"duplicate", "a: 1\na: 2\n", false},
		{"bad indent", "a:\n    b: 1\n  c: 2\n", false},
		{"value colon", "a: b: c\n", false},
		{"trailing colon", "a: b:\n", false},
		{"scalar document", "just text\n", false},
		{"complex key", "? a\n: b\n", false},
		{"directive", "%YAML 1.1\na: b\n", false},
		{"after quote", "a: 'x' y\n", false},
		{"dash value", "a: - b\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sameAsSlow(t, []byte(c.doc)); got != c.fast {
				t.Errorf("fast path took it: %v, want %v", got, c.fast)
			}
		})
	}
}

// Every YAML document in the repository's test data (valid and invalid) decodes the same
// either way, and the bundled example goes through the fast path.
func TestFastParseTestdata(t *testing.T) {
	fast, all := 0, 0
	eachTestdataDocument(t, []string{"testdata", "../testdata", "../xds/testdata", "../vipalloc/testdata"}, func(_ string, doc document) {
		all++
		if sameAsSlow(t, doc.text) {
			fast++
		}
	})
	t.Logf("%d of %d documents through the fast path", fast, all)
	if all == 0 || fast < all/2 {
		t.Errorf("only %d of %d documents through the fast path", fast, all)
	}
	data, err := os.ReadFile("../testdata/mesh/dataplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range splitDocuments(data) {
		if !sameAsSlow(t, doc.text) {
			t.Errorf("the bundled dataplane went the slow way:\n%s", doc.text)
		}
	}
}

func FuzzFastParse(f *testing.F) {
	for _, s := range []string{
		"type: Dataplane\nname: a\nnetworking:\n  inbound:\n  - port: 80\n    tags: {}\n",
		"a:\n  - - 1\n    - 'x''y'\n  -\nb: \"q\" # c\n",
		"- a: 1\n  b: [] # x\n- yes\n- 0\n- -3\n- 1.5\n",
		"k : v\nx: a:b\ny: ~\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if strings.Contains(doc, "\n---") || strings.HasPrefix(doc, "---") {
			return // documents come split
		}
		sameAsSlow(t, []byte(doc))
	})
}

// inventory10k is the inventory of the agent's cold-start benchmark: 10,000 dataplanes, one
// service each, in one file.
func inventory10k() []byte {
	var sb strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: svc%d-1\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: svc%d\n        version: v1\n---\n",
			i, 1+i/62500, (i/250)%250, i%250+1, i)
	}
	return []byte(sb.String())
}

// BenchmarkDecode10k: mesh.Decode of the 10,000-dataplane file (one core), and the same
// documents through the YAML -> JSON -> nodes path alone (the peer: what every document
// cost before the fast path).
//
//	go test -run '^$' -bench Decode10k -benchmem ./mesh
func BenchmarkDecode10k(b *testing.B) {
	data := inventory10k()
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rs, err := Decode("inventory.yaml", data)
			if err != nil || len(rs) != 10000 {
				b.Fatal(len(rs), err)
			}
		}
	})
	b.Run("DecodeViaJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i, doc := range splitDocuments(data) {
				nodes, err := parseDocumentSlow(quoteTemplates(doc.text))
				if err != nil {
					b.Fatal(err)
				}
				if _, errs := decodeDocumentIn(nil, NewSource("inventory.yaml", i+1), nodes[0]); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
		}
	})
}

func TestIsYAMLFloat(t *testing.T) {
	re := regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	for _, s := range []string{"", "1", "-1", "+.5", ".", "1.", "1.e5", "1e", "1e+", "1e+5", "-.e5",
		".5e-3", "10.1.2.3", "1.2.3", "+", "-", "e5", "1E5", "1x", "0.0", "12.34e56", "1..2"} {
		if got, want := isYAMLFloat(s), re.MatchString(s); got != want {
			t.Errorf("isYAMLFloat(%q) = %v, want %v", s, got, want)
		}
	}
}

// The quick pass (no paths, keys unsorted) decodes every document of the test data like the
// full pass, or hands it over (redo) when it has a problem to report.
func TestDecodeQuickSameAsFull(t *testing.T) {
	quick, redo := 0, 0
	eachTestdataDocument(t, []string{"testdata", "../testdata"}, func(path string, doc document) {
		n1, err1 := parseDocument(doc.text)
		n2, _ := parseDocument(doc.text)
		if err1 != nil {
			return
		}
		for i := range n1 {
			r1, e1, again := decodeQuickIn(nil, NewSource("f", 1), n1[i])
			r2, e2 := decodeDocumentIn(nil, NewSource("f", 1), n2[i])
			if again {
				redo++
				if len(e2) == 0 {
					t.Errorf("%s line %d: the quick pass failed a document the full pass accepts", path, doc.line)
				}
				continue
			}
			quick++
			if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(e1, e2) {
				t.Errorf("%s line %d: quick %#v %v, full %#v %v", path, doc.line, r1, e1, r2, e2)
			}
		}
	})
	t.Logf("%d documents decoded quickly, %d redone", quick, redo)
	if quick == 0 || redo == 0 {
		t.Errorf("quick %d, redo %d: both paths should be exercised", quick, redo)
	}
}

var markerAfterMarker = regexp.MustCompile(`(?m)^---[ ]+(---|\.\.\.)`)

// FuzzStreamSplit is the differential test of multi-document streams: the documents this
// package reads from a stream (splitter, then the fast path or the YAML library per
// document) are those go.yaml.in/yaml/v2's own multi-document decoder reads, in order, each
// with the same content.
func FuzzStreamSplit(f *testing.F) {
	for _, s := range []string{
		"a: 1\n---\nb: 2\n",
		"--- {a: 1}\n--- {b: [1, 2]}\n",
		"a: 1\n...\nb: 2\n",
		"a: 1\n...\n---\nb: x\n# c\n---\n",
		"---\na: |\n  text\n---\nb: y\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream string) {
		if strings.Contains(stream, "{{") || strings.ContainsAny(stream, "\t\r&*!%@`") {
			return // template quoting is ours; anchors, tags and directives are beyond the splitter
		}
		if markerAfterMarker.MatchString(stream) {
			return // `--- ---`: a marker as the content of a marker line, beyond the splitter
		}
		dec := yamlv2.NewDecoder(strings.NewReader(stream))
		dec.SetStrict(true) // as this package reads (duplicate keys refused)
		var want []any
		for {
			var v any
			err := dec.Decode(&v)
			if err == io.EOF {
				break
			}
			if err != nil {
				return // not YAML: nothing to compare
			}
			if v == nil {
				continue // an empty document
			}
			b, err := yamlv2.Marshal(v)
			if err != nil {
				return
			}
			nodes, err := parseDocumentSlow(b)
			if err != nil {
				return // not representable as JSON (non-string keys...)
			}
			for _, n := range nodes { // a list document is its elements, as in Decode
				if n != nil {
					want = append(want, n)
				}
			}
		}
		var got []any
		for _, doc := range splitDocuments([]byte(stream)) {
			nodes, err := parseDocument(doc.text)
			if err != nil {
				t.Fatalf("document %q: %v (the YAML library reads the stream)", doc.text, err)
			}
			for _, n := range nodes {
				if n != nil {
					got = append(got, n)
				}
			}
		}
		if !reflect.DeepEqual(canonNumbers(got), canonNumbers(want)) {
			t.Fatalf("stream %q:\n got %#v\nwant %#v", stream, got, want)
		}
	})
}

// canonNumbers turns every json.Number into its float64 value (-0 as 0): the reference side
// goes through a YAML re-encoding that writes numbers in its own form.
func canonNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		if f == 0 {
			f = 0
		}
		return f
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = canonNumbers(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = canonNumbers(e)
		}
		return out
	}
	return v
}
