package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Decode reads every resource of one file: multi-document YAML (documents separated by
// `---` lines, numbered from 1, empty ones skipped) or JSON (an object, or an array of
// objects numbered from 1). Each resource is decoded and validated. source names the file in
// errors ("source#doc") and in each resource's Meta.Source (a name the process keeps: see
// Source).
//
// The resources that decoded and validated are returned even when others did not; err is
// then an Errors listing every problem of every document.
//
// A kind only the control plane builds (DNSZone: DerivedKinds) is refused: such documents
// reach an agent over the control plane's link alone (DecodeFromControlPlane).
func Decode(source string, data []byte) ([]Resource, error) {
	return refuseDerived(decodeAll(source, data))
}

// decodeAll is Decode accepting every kind.
func decodeAll(source string, data []byte) ([]Resource, error) {
	return decodeAllIn(newStrArena(len(data)), source, data)
}

// decodeAllIn is decodeAll, copying the strings into strs (an arena for data).
func decodeAllIn(strs *strArena, source string, data []byte) ([]Resource, error) {
	var out []Resource
	var errs Errors
	num := 0
	file := NewSource(source, 0)
	stopped := false
	stopAt := func(doc int) {
		errs = append(errs[:MaxFileErrors], &FieldError{Source: file.WithDoc(doc).String(),
			Msg: fmt.Sprintf("decoding stopped after %d problems: fix those first", MaxFileErrors)})
		stopped = true
	}
	stop := func() bool {
		if len(errs) < MaxFileErrors {
			return false
		}
		stopAt(num + 1)
		return true
	}
	documents := splitDocuments(data)
docs:
	for _, doc := range documents {
		if stop() {
			break
		}
		strs.reading(len(data) - (cap(data) - cap(doc.text))) // doc.text is a part of data, to its end
		nodes, err := parseDocumentItems(doc.text)
		strs.alone = len(documents) == 1 && len(nodes) == 1 // a text of one resource
		if err != nil {
			num++
			errs = append(errs, &FieldError{Source: file.WithDoc(num).String(),
				Msg: "invalid YAML/JSON: " + shiftLines(explainParseError(err, doc.text), doc.line-1)})
			continue
		}
		for i, n := range nodes {
			if stop() {
				break docs
			}
			strs.fit(n)
			num++
			r, derrs, redo := decodeQuickIn(strs, file.WithDoc(num), n, doc.text)
			if redo {
				// A problem: decode the document again, reporting every problem in order
				// with its path (from a fresh parse: the quick pass may have changed it).
				if again, err := parseDocumentItems(doc.text); err == nil && i < len(again) {
					n = again[i] // always: parsing is deterministic
				}
				r, derrs = decodeDocumentIn(strs, file.WithDoc(num), n, doc.text)
			}
			errs = append(errs, derrs...)
			if r != nil && len(derrs) == 0 {
				out = append(out, r)
			}
		}
	}
	if !stopped && len(errs) > MaxFileErrors {
		stopAt(num) // the last document had more than were listed
	}
	settle(out, strs.alone)
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// MaxFileErrors is the number of problems of one file after which Decode stops, saying so:
// a file of junk documents (300,000 of them in 1.8 MB) took 17 s and printed 31 MB of errors,
// at every reload. A file with a problem is refused whatever the number.
const MaxFileErrors = 100

// LoadFile decodes one file (see Decode); errors name the file by path.
func LoadFile(path string) ([]Resource, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{Source: path, Msg: err.Error()}}
	}
	return Decode(path, data)
}

// LoadDir decodes every resource file under dir (see ResourceFiles), in lexical order. Every
// problem of every file is returned at once in an Errors.
func LoadDir(dir string) ([]Resource, error) {
	var out []Resource
	paths, errs := ResourceFiles(dir)
	for _, path := range paths {
		rs, err := LoadFile(path)
		out = append(out, rs...)
		errs = AppendErrors(errs, err)
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// Load builds the Snapshot of one dataplane: its own Dataplane from dataplaneFile (which must
// hold exactly one resource, a Dataplane) and the rest of the mesh from policiesDir (may be
// empty: no policies). Every problem of every file is reported at once.
func Load(dataplaneFile, policiesDir string) (*Snapshot, error) {
	rs, err := LoadFile(dataplaneFile)
	self, errs := SelfDataplane(dataplaneFile, rs, err)
	var policies []Resource
	if policiesDir != "" {
		policies, err = LoadDir(policiesDir)
		errs = AppendErrors(errs, err)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return NewSnapshot(self, policies)
}

func isResourceFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

type document struct {
	text []byte
	line int // first line of the document in its file, from 1
}

// splitDocuments splits a file on `---` lines, dropping documents with nothing but
// whitespace and comments.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine := 0, 1
	line := 1
	flush := func(end int) {
		if text := data[start:end]; !blankYAML(text) {
			docs = append(docs, document{text: text, line: startLine})
		}
	}
	for i := 0; i <= len(data); {
		j := bytes.IndexByte(data[i:], '\n')
		end := len(data)
		if j >= 0 {
			end = i + j
		}
		ln := bytes.TrimRight(data[i:end], "\r")
		switch {
		case IsSeparator(ln):
			flush(i)
			start, startLine = end+1, line+1
			if start > len(data) {
				start = len(data)
			}
		case bytes.HasPrefix(ln, dashes) && len(ln) > 3 && (ln[3] == ' ' || ln[3] == '\t'):
			// `--- {type: Dataplane, ...}` or `--- |`: the document starts on the marker's line.
			flush(i)
			start, startLine = i+4, line
		case markerLine(ln, dots):
			// `...` ends a document; what follows (with or without `---`) is the next one.
			flush(i)
			start, startLine = end+1, line+1
			if start > len(data) {
				start = len(data)
			}
		}
		if j < 0 {
			break
		}
		i = end + 1
		line++
	}
	flush(len(data))
	return docs
}

var (
	dashes = []byte("---")
	dots   = []byte("...")
)

// IsSeparator reports whether line (without its line break) separates two YAML documents:
// `---`, alone or followed by blanks and a comment (`--- # web`), as the directory source
// and the control plane's directory store cut files too.
func IsSeparator(line []byte) bool { return markerLine(line, dashes) }

// markerLine reports whether line is marker (`---` or `...`), alone or followed by blanks
// and then nothing or a comment.
func markerLine(line, marker []byte) bool {
	rest, ok := bytes.CutPrefix(line, marker)
	if !ok {
		return false
	}
	after := bytes.TrimLeft(rest, " \t\n\f\r")
	return len(rest) == 0 || (len(after) < len(rest) && (len(after) == 0 || after[0] == '#'))
}

func blankYAML(b []byte) bool {
	for len(b) > 0 {
		l := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		l = bytes.TrimSpace(l)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// infinity matches a plain scalar YAML 1.1 reads as infinity or NaN, with the text before it
// on its line.
var infinity = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^([^#\n]*?(?:[:\[{,-][ \t]*))([-+]?\.(?:inf|Inf|INF|nan|NaN|NAN))[ \t]*(?:[,\]}#].*)?\r?$`)
})

// explainParseError names the line and the text of a value YAML reads as a number JSON
// cannot hold (.inf, .nan): the library says only "json: unsupported value: +Inf".
func explainParseError(err error, text []byte) string {
	msg := err.Error()
	_, what, ok := strings.Cut(msg, "json: unsupported value: ")
	if !ok {
		return msg
	}
	m := infinity().FindSubmatchIndex(text)
	if m == nil {
		return msg
	}
	line := bytes.Count(text[:m[4]], []byte("\n")) + 1
	v := string(text[m[4]:m[5]])
	return fmt.Sprintf("line %d: YAML reads %s as a number JSON cannot hold (%s): quote it (%q)", line, v, what, v)
}

// parseDocumentItems is parseDocument with the items of a Kubernetes List (`kind: List`,
// `kind: DataplaneList`... with `items`, what `kubectl get -o yaml` writes) in its place:
// each item is a document, numbered as a JSON array's elements are.
func parseDocumentItems(text []byte) ([]any, error) {
	nodes, err := parseDocument(text)
	if err != nil {
		return nil, err
	}
	for i, n := range nodes {
		if items, ok := listItems(n); ok {
			out := append(nodes[:i:i], items...)
			for _, n := range nodes[i+1:] {
				if items, ok := listItems(n); ok {
					out = append(out, items...)
				} else {
					out = append(out, n)
				}
			}
			return out, nil
		}
	}
	return nodes, nil
}

// listItems is the items of a Kubernetes List, and whether n is one with a list of items.
func listItems(n any) ([]any, bool) {
	m, ok := n.(map[string]any)
	if !ok {
		return nil, false
	}
	if k, _ := m["kind"].(string); !isListKind(k) {
		return nil, false
	}
	items, ok := m["items"].([]any)
	return items, ok
}

func isListKind(k string) bool { return strings.HasSuffix(k, "List") }

// parseDocument turns one YAML or JSON document into generic nodes: one per document, or one
// per element when the document is a list.
func parseDocument(text []byte) ([]any, error) {
	if list, ok := parseJSON(text); ok {
		return list, nil
	}
	text = quoteTemplates(text)
	if n, ok := fastParse(text); ok {
		if list, ok := n.([]any); ok {
			return list, nil
		}
		return []any{n}, nil
	}
	return parseDocumentSlow(text)
}

// parseJSON reads a document written as JSON (it starts with { or [) with encoding/json,
// numbers kept as written (json.Number): 1.8x the fast YAML path, against 6.4x for the YAML
// library. A document that starts so but is not JSON (a YAML flow mapping, `{type: x}`) is
// left to YAML.
func parseJSON(text []byte) ([]any, bool) {
	t := bytes.TrimSpace(text)
	if len(t) == 0 || t[0] != '{' && t[0] != '[' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var n any
	if err := dec.Decode(&n); err != nil || dec.More() {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	if jsonDuplicateKey(t) {
		return nil, false // YAML's strict reading reports it, with its line
	}
	if list, ok := n.([]any); ok {
		return list, true
	}
	return []any{n}, true
}

// jsonDuplicateKey reports whether an object of the well-formed JSON text t has a key twice
// (as written: "a" and "\u0061" are not told apart). encoding/json keeps the last value
// silently; YAML refuses a duplicate, and so must the same document written as JSON. One
// pass over the bytes; an object's keys are compared in a list, in a set past 16 of them.
func jsonDuplicateKey(t []byte) bool {
	type frame struct {
		object, wantKey bool
		keys            [][]byte
		set             map[string]struct{}
	}
	var stack []frame
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '{':
			stack = append(stack, frame{object: true, wantKey: true})
		case '[':
			stack = append(stack, frame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if f := &stack[len(stack)-1]; f.object {
				f.wantKey = true
			}
		case '"':
			start := i + 1
			for i++; i < len(t) && t[i] != '"'; i++ {
				if t[i] == '\\' {
					i++
				}
			}
			if len(stack) == 0 {
				continue
			}
			f := &stack[len(stack)-1]
			if !f.object || !f.wantKey {
				continue
			}
			f.wantKey = false
			key := t[start:i]
			if f.set != nil {
				if _, dup := f.set[string(key)]; dup {
					return true
				}
				f.set[string(key)] = struct{}{}
				continue
			}
			for _, k := range f.keys {
				if bytes.Equal(k, key) {
					return true
				}
			}
			f.keys = append(f.keys, key)
			if len(f.keys) > 16 {
				f.set = make(map[string]struct{}, 2*len(f.keys))
				for _, k := range f.keys {
					f.set[string(k)] = struct{}{}
				}
				f.keys = nil
			}
		}
	}
	return false
}

// parseDocumentSlow is parseDocument through sigs.k8s.io/yaml, for every document.
func parseDocumentSlow(text []byte) ([]any, error) {
	j, err := yaml.YAMLToJSONStrict(text)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var n any
	if err := dec.Decode(&n); err != nil {
		return nil, err
	}
	if list, ok := n.([]any); ok {
		return list, nil
	}
	return []any{n}, nil
}

// templateValue matches `key: {{...` lines: YAML would read the unquoted template as a flow
// mapping (the MeshExternalService design writes `template: {{ name }}.svc.meshext.local`).
var templateValue = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^(\s*(?:-\s+)?[\w./"'-]+:[ \t]+)(\{\{.*?)(\s+#.*)?\r?$`)
})

// quoteTemplates quotes unquoted template values, keeping line numbers unchanged. Lines of
// a block scalar (`note: |` and the more indented lines after it) are text, never touched.
func quoteTemplates(text []byte) []byte {
	if !bytes.Contains(text, []byte("{{")) {
		return text
	}
	var out []byte
	blockIndent := -1 // inside a block scalar whose header line had this indentation
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i+1], text[i+1:]
		} else {
			text = nil
		}
		body := bytes.TrimRight(line, "\r\n")
		indent := len(body) - len(bytes.TrimLeft(body, " "))
		blank := len(bytes.TrimSpace(body)) == 0
		if blockIndent >= 0 && (blank || indent > blockIndent) {
			out = append(out, line...) // block scalar content
			continue
		}
		blockIndent = -1
		if blockHeader().Match(body) {
			blockIndent = indent
		}
		if bytes.Contains(body, []byte("{{")) {
			line = templateValue().ReplaceAllFunc(line, func(m []byte) []byte {
				sub := templateValue().FindSubmatch(m)
				val := strings.TrimRight(string(sub[2]), " \t")
				return []byte(string(sub[1]) + "'" + strings.ReplaceAll(val, "'", "''") + "'")
			})
		}
		out = append(out, line...)
	}
	return out
}

// blockHeader matches a line that starts a block scalar: `key: |`, `- >-`, `key: |2 # c`.
var blockHeader = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^|:|-)[ \t]+[|>][-+0-9]*[ \t]*(#.*)?$`) })

var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

// shiftLines turns a YAML error's document-relative line numbers into file line numbers.
func shiftLines(msg string, offset int) string {
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	return yamlLine().ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(s[len("line "):])
		return "line " + strconv.Itoa(n+offset)
	})
}
