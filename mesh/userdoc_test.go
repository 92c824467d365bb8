package mesh

import (
	"strings"
	"testing"
)

// Documents gives each resource as written, in Decode's order: a document's own text
// (comments and an unquoted template kept), the JSON of each element of a JSON array or a
// Kubernetes List.
func TestDocumentsAsWritten(t *testing.T) {
	one := "# a comment\ntype: HostnameGenerator\nname: g\nspec:\n  targetRef:\n    kind: MeshExternalService\n  template: {{ name }}.mesh\n"
	list := `{"kind": "List", "items": [{"type": "Dataplane", "mesh": "default", "name": "a", "networking": {"address": "10.0.0.1", "inbound": [{"port": 80, "tags": {"kuma.io/service": "a"}}]}}]}`
	array := `[{"type": "Dataplane", "mesh": "default", "name": "b", "networking": {"address": "10.0.0.2", "inbound": [{"port": 80, "tags": {"kuma.io/service": "b"}}]}}]`
	data := []byte(one + "---\n" + list + "\n---\n" + array + "\n")
	rs, err := Decode("f.yaml", data)
	if err != nil || len(rs) != 3 {
		t.Fatalf("decode: %d %v", len(rs), err)
	}
	docs, err := Documents(data)
	if err != nil || len(docs) != 3 {
		t.Fatalf("documents: %q %v", docs, err)
	}
	if string(docs[0]) != one {
		t.Errorf("a document's text: %q, want %q", docs[0], one)
	}
	for i, name := range []string{"a", "b"} {
		d := string(docs[i+1])
		if !strings.HasPrefix(d, "{") || !strings.Contains(d, `"name":"`+name+`"`) || strings.Contains(d, "List") {
			t.Errorf("element %s: %s", name, d)
		}
	}
	j, err := DocumentJSON(docs[0])
	if err != nil || !strings.Contains(string(j), `"template":"{{ name }}.mesh"`) {
		t.Errorf("DocumentJSON: %s %v", j, err)
	}
}
