package cplink

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// placeholder is `{{ name }}` (spaces optional), the form of Kuma's dataplane templates.
var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}`)

// RenderVars replaces every `{{ name }}` of a dataplane file with its value. A placeholder
// without a value is an error naming it and the line, so a forgotten --dataplane-var is
// caught before anything serves. Files without placeholders are returned as they are.
func RenderVars(data []byte, vars map[string]string) ([]byte, error) {
	if !bytes.Contains(data, []byte("{{")) {
		return data, nil
	}
	for _, m := range anyBraces().FindAllIndex(data, -1) {
		if whole := data[m[0]:m[1]]; !placeholder.Match(whole) {
			line := 1 + bytes.Count(data[:m[0]], []byte("\n"))
			return nil, fmt.Errorf("line %d: %s is not a placeholder: write {{ %s }} (a letter or _, then letters, digits, _ . or -)",
				line, whole, suggestName(string(whole[2:len(whole)-2])))
		}
	}
	var out bytes.Buffer
	var missing []string
	firstLine, last := 0, 0
	for _, m := range placeholder.FindAllSubmatchIndex(data, -1) {
		out.Write(data[last:m[0]])
		last = m[1]
		name := string(data[m[2]:m[3]])
		if v, ok := vars[name]; ok {
			out.WriteString(v)
			continue
		}
		if missing == nil {
			firstLine = 1 + bytes.Count(data[:m[0]], []byte("\n"))
		}
		if !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
	}
	out.Write(data[last:])
	if len(missing) > 0 {
		given := make([]string, 0, len(vars))
		for k := range vars {
			given = append(given, k)
		}
		sort.Strings(given)
		return nil, fmt.Errorf("line %d: no value for %s (give it with --dataplane-var %s=VALUE; given: %q)",
			firstLine, strings.Join(quoteAll(missing), ", "), missing[0], given)
	}
	return out.Bytes(), nil
}

// anyBraces is any {{ ... }} on one line: each must be a placeholder.
var anyBraces = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\{[^\n]*?\}\}`) })

// ValidVarName reports whether name can be a `{{ name }}` placeholder's (--dataplane-var):
// a letter or _, then letters, digits, _ . or -.
func ValidVarName(name string) bool {
	for i, r := range name {
		switch {
		case r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '.' || r == '-'):
		default:
			return false
		}
	}
	return name != ""
}

// suggestName is the placeholder name an operator probably meant in {{ inner }}: Go
// template's {{ .name }} and pipelines ({{ name | upper }}) are not rendered.
func suggestName(inner string) string {
	f := strings.FieldsFunc(strings.TrimPrefix(strings.TrimSpace(inner), "."), func(r rune) bool { return r == ' ' || r == '|' || r == '\t' })
	if len(f) > 0 && ValidVarName(f[0]) {
		return f[0]
	}
	return "name"
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("{{ %s }}", s)
	}
	return out
}
