package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Documents returns each resource of a file as its user wrote it, in the order Decode
// returns them: the text of a YAML or JSON document holding one resource (comments, key
// order and Kuma's forms kept), or the JSON of one element of a JSON array or of a
// Kubernetes List. A control plane stores these and returns them, while it validates and
// serves what Decode makes of them.
func Documents(data []byte) ([][]byte, error) {
	var out [][]byte
	num := 0
	for _, doc := range splitDocuments(data) {
		nodes, err := parseDocumentItems(doc.text)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", num+1, err)
		}
		if len(nodes) == 1 && !listDocument(doc.text) {
			num++
			out = append(out, doc.text)
			continue
		}
		for _, n := range nodes {
			num++
			b, err := json.Marshal(n)
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", num, err)
			}
			out = append(out, append(b, '\n'))
		}
	}
	return out, nil
}

// listDocument reports whether a document is a list (a JSON array, a YAML sequence, a
// Kubernetes List): its elements are the resources, not its text.
func listDocument(text []byte) bool {
	orig := text
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		if t[0] == '[' || t[0] == '-' && (len(t) == 1 || t[1] == ' ' || t[1] == '\t') {
			return true
		}
		break
	}
	nodes, err := parseDocument(orig)
	if err != nil || len(nodes) != 1 {
		return true
	}
	_, list := listItems(nodes[0])
	return list
}

// DocumentJSON is one resource's document (YAML or JSON, as Documents gives it) as JSON with
// sorted keys, for comparing two documents: templates written unquoted (`host: {{ name }}`)
// read as the text they are, numbers as written.
func DocumentJSON(doc []byte) ([]byte, error) {
	nodes, err := parseDocument(doc)
	if err != nil {
		return nil, err
	}
	if len(nodes) != 1 {
		return nil, fmt.Errorf("want one document, got %d", len(nodes))
	}
	return json.Marshal(nodes[0])
}
