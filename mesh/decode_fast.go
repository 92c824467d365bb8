package mesh

import (
	"encoding/json"
	"strconv"
	"strings"
)

// This file is the fast path of parseDocument: a one-pass reader for the block YAML that
// resource files are made of (mappings, sequences, one-line plain and quoted scalars,
// comments), producing the same generic nodes as the YAML -> JSON -> `any` path (strings,
// json.Number, bool, nil, map[string]any, []any) without building either intermediate.
//
// It never decides anything the slow path would decide differently: on the first thing it
// does not fully understand (flow collections, block scalars, anchors, tags, multi-line
// scalars, escapes, tabs, non-ASCII, duplicate keys, odd indentation, any plain scalar YAML
// 1.1 would read as something other than a string, an int or a bool...) it gives up and the
// document goes through sigs.k8s.io/yaml as before, so errors and their line numbers come
// from there unchanged.

// fastLine is one line with content: its indentation and its text after it.
type fastLine struct {
	indent int
	text   string
}

type fastParser struct {
	lines []fastLine
	pos   int
}

// fastParse returns the document's node and true, or false when the slow path must decide.
func fastParse(data []byte) (any, bool) {
	text := string(data) // one copy; every key and value is a slice of it
	p := fastParser{lines: make([]fastLine, 0, 16)}
	start := 0
	for i := 0; i <= len(text); i++ {
		if i < len(text) {
			c := text[i]
			if c == '\n' {
				// handled below
			} else if c < 0x20 || c >= 0x7f {
				return nil, false // tabs, CR, control characters, non-ASCII: the slow path
			} else {
				continue
			}
		}
		line := text[start:i]
		start = i + 1
		n := 0
		for n < len(line) && line[n] == ' ' {
			n++
		}
		content := strings.TrimRight(line[n:], " ")
		if content == "" || content[0] == '#' {
			continue
		}
		if n == 0 && (strings.HasPrefix(content, "---") || strings.HasPrefix(content, "...") ||
			content[0] == '%') {
			return nil, false
		}
		p.lines = append(p.lines, fastLine{indent: n, text: content})
	}
	if len(p.lines) == 0 {
		return nil, false
	}
	n, ok := p.node(p.lines[0].indent)
	if !ok || p.pos != len(p.lines) {
		return nil, false
	}
	return n, true
}

// node reads the block node (mapping or sequence) starting at the current line, which is
// at indentation indent.
func (p *fastParser) node(indent int) (any, bool) {
	l := p.lines[p.pos]
	if l.indent != indent {
		return nil, false
	}
	if isSeqEntry(l.text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func isSeqEntry(s string) bool { return s[0] == '-' && (len(s) == 1 || s[1] == ' ') }

func (p *fastParser) sequence(indent int) (any, bool) {
	list := []any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent || (l.indent == indent && !isSeqEntry(l.text)) {
			break
		}
		if l.indent > indent {
			return nil, false
		}
		rest := strings.TrimLeft(l.text[1:], " ")
		if rest == "" || rest[0] == '#' {
			// The item is on the following lines, or is null.
			p.pos++
			if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
				n, ok := p.node(p.lines[p.pos].indent)
				if !ok {
					return nil, false
				}
				list = append(list, n)
			} else {
				list = append(list, nil)
			}
			continue
		}
		col := indent + len(l.text) - len(rest)
		if isSeqEntry(rest) || isKeyLine(rest) {
			// The item is a block node starting on this line: read it as if it started
			// its own line at col.
			p.lines[p.pos] = fastLine{indent: col, text: rest}
			n, ok := p.node(col)
			if !ok {
				return nil, false
			}
			list = append(list, n)
			continue
		}
		v, ok := inlineValue(rest)
		if !ok {
			return nil, false
		}
		p.pos++
		if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
			return nil, false // a multi-line scalar
		}
		list = append(list, v)
	}
	return list, true
}

func (p *fastParser) mapping(indent int) (any, bool) {
	m := make(map[string]any, 4)
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, false
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false // strict YAML refuses it; let it say so
		}
		p.pos++
		if rest == "" || rest[0] == '#' {
			// The value is on the following lines (a sequence may sit at the key's own
			// indentation), or is null.
			if p.pos < len(p.lines) {
				next := p.lines[p.pos]
				if next.indent > indent || (next.indent == indent && isSeqEntry(next.text)) {
					n, ok := p.node(next.indent)
					if !ok {
						return nil, false
					}
					m[key] = n
					continue
				}
			}
			m[key] = nil
			continue
		}
		v, ok := inlineValue(rest)
		if !ok {
			return nil, false
		}
		if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
			return nil, false // a multi-line scalar
		}
		m[key] = v
	}
	return m, true
}

// isKeyLine reports whether s reads as `key: ...` (as far as splitKey accepts it).
func isKeyLine(s string) bool {
	_, _, ok := splitKey(s)
	return ok
}

// splitKey splits `key: rest` into the key (a string key) and what follows the colon,
// left-trimmed.
func splitKey(s string) (key, rest string, ok bool) {
	var after string
	switch s[0] {
	case '\'', '"':
		k, tail, ok := quoted(s)
		if !ok {
			return "", "", false
		}
		tail = strings.TrimLeft(tail, " ")
		if tail == "" || tail[0] != ':' {
			return "", "", false
		}
		key, after = k, tail[1:]
	default:
		i := strings.Index(s, ": ")
		if i < 0 {
			if !strings.HasSuffix(s, ":") {
				return "", "", false
			}
			i = len(s) - 1
		}
		if c := strings.Index(s, " #"); c >= 0 && c < i {
			return "", "", false
		}
		key = strings.TrimRight(s[:i], " ")
		if key == "" || len(key) > 1000 || !plainStart(key) {
			return "", "", false
		}
		if _, isString := resolvePlain(key); !isString {
			return "", "", false
		}
		after = s[i+1:]
	}
	if after != "" && after[0] != ' ' {
		return "", "", false
	}
	return key, strings.TrimLeft(after, " "), true
}

// inlineValue reads a value written on its key's (or dash's) line: a one-line scalar, or
// the empty `{}` / `[]`.
func inlineValue(s string) (any, bool) {
	switch s[0] {
	case '\'', '"':
		v, tail, ok := quoted(s)
		if !ok {
			return nil, false
		}
		if t := strings.TrimLeft(tail, " "); t != "" && (t == tail || t[0] != '#') {
			return nil, false
		}
		return v, true
	}
	if c := strings.Index(s, " #"); c >= 0 {
		s = strings.TrimRight(s[:c], " ")
	}
	if s[0] == '{' || s[0] == '[' {
		return flowValue(s)
	}
	if !plainStart(s) || strings.Contains(s, ": ") || strings.HasSuffix(s, ":") {
		return nil, false
	}
	v, _ := resolvePlain(s)
	if v == errSlowPath {
		return nil, false
	}
	return v, true
}

// flowValue reads a one-line flow mapping or sequence of plain scalars, `{a: 1, b: x}` or
// `[a, b]` (quotes, nesting, comments, empty entries: the slow path).
func flowValue(s string) (any, bool) {
	closing := byte('}')
	if s[0] == '[' {
		closing = ']'
	}
	if s[len(s)-1] != closing {
		return nil, false
	}
	inner := strings.TrimSpace(s[1 : len(s)-1])
	if strings.ContainsAny(inner, "[]{}'\"#") {
		return nil, false
	}
	var items []string
	if inner != "" {
		items = strings.Split(inner, ",")
	}
	if closing == ']' {
		list := make([]any, 0, len(items))
		for _, it := range items {
			v, ok := flowScalar(strings.TrimSpace(it))
			if !ok {
				return nil, false
			}
			list = append(list, v)
		}
		return list, true
	}
	m := make(map[string]any, len(items))
	for _, it := range items {
		k, v, found := strings.Cut(strings.TrimSpace(it), ": ")
		k = strings.TrimRight(k, " ")
		if !found || k == "" || !plainStart(k) || strings.Contains(k, ":") {
			return nil, false
		}
		if _, isString := resolvePlain(k); !isString {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		val, ok := flowScalar(strings.TrimSpace(v))
		if !ok {
			return nil, false
		}
		m[k] = val
	}
	return m, true
}

// flowScalar resolves one plain scalar of a flow collection.
func flowScalar(s string) (any, bool) {
	if s == "" || !plainStart(s) || strings.Contains(s, ":") {
		return nil, false
	}
	v, _ := resolvePlain(s)
	if v == errSlowPath {
		return nil, false
	}
	return v, true
}

// quoted reads a quoted scalar that ends on this line, without escapes other than the
// single-quoted ”; it returns the value and what follows the closing quote.
func quoted(s string) (string, string, bool) {
	q := s[0]
	if q == '"' {
		end := strings.IndexByte(s[1:], '"')
		if end < 0 || strings.IndexByte(s[1:end+1], '\\') >= 0 {
			return "", "", false
		}
		return s[1 : end+1], s[end+2:], true
	}
	// Single-quoted: '' is a quote.
	var b []byte
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			if b != nil {
				b = append(b, s[i])
			}
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			if b == nil {
				b = append(make([]byte, 0, len(s)), s[1:i]...)
			}
			b = append(b, '\'')
			i++
			continue
		}
		if b == nil {
			return s[1:i], s[i+1:], true
		}
		return string(b), s[i+1:], true
	}
	return "", "", false
}

// plainStart reports whether s may start a plain scalar in block context.
func plainStart(s string) bool {
	switch s[0] {
	case ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '-', '?', ':':
		return len(s) > 1 && s[1] != ' '
	}
	return true
}

// errSlowPath is resolvePlain's answer for scalars only the YAML library may resolve.
var errSlowPath = &struct{ string }{"slow path"}

// isYAMLFloat matches go.yaml.in/yaml/v2's float syntax,
// ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
func isYAMLFloat(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// resolvePlain resolves a plain scalar as YAML 1.1 does (go.yaml.in/yaml/v2's resolve),
// giving the node the JSON round trip would give: a string (isString), a json.Number for a
// plain decimal int, a bool, nil - or errSlowPath for everything else (floats, timestamps,
// other int forms, merge keys, NaN/Inf), left to the library.
func resolvePlain(s string) (v any, isString bool) {
	if len(s) > 6 && s[0] != '+' && s[0] != '-' && s[0] != '.' && (s[0] < '0' || s[0] > '9') {
		return s, true // no word, number or timestamp is that long and starts so
	}
	switch yamlWords[s] {
	case wordTrue:
		return true, false
	case wordFalse:
		return false, false
	case wordNull:
		return nil, false
	case wordOther:
		return errSlowPath, false
	}
	switch c := s[0]; {
	case c == '+' || c == '-' || (c >= '0' && c <= '9'):
		if isDecimalInt(s) {
			return json.Number(s), false
		}
		if couldBeNumberOrTime(s) {
			return errSlowPath, false
		}
		return s, true
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return errSlowPath, false
		}
		return s, true
	}
	return s, true
}

// isDecimalInt: an int in canonical decimal form that fits int64 (the JSON round trip keeps
// its text as is).
func isDecimalInt(s string) bool {
	d := s
	if d[0] == '-' {
		d = d[1:]
	}
	if d == "" || len(d) > 18 || (d[0] == '0' && (len(d) > 1 || s[0] == '-')) {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

// couldBeNumberOrTime is conservative: true for anything YAML 1.1 might read as a number or
// a timestamp.
func couldBeNumberOrTime(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 4 && i < len(s) && s[i] == '-' {
		return true // a timestamp, maybe
	}
	plain := strings.ReplaceAll(s, "_", "")
	if strings.IndexByte(plain, '.') >= 0 {
		return isYAMLFloat(plain) // no int form has a dot (addresses end here)
	}
	if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return true
	}
	if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return true
	}
	if isYAMLFloat(plain) {
		return true
	}
	return strings.HasPrefix(plain, "0b") || strings.HasPrefix(plain, "-0b")
}

const (
	wordTrue = iota + 1
	wordFalse
	wordNull
	wordOther
)

// yamlWords: the plain scalars YAML 1.1 resolves by name.
var yamlWords = map[string]int{
	"y": wordTrue, "Y": wordTrue, "yes": wordTrue, "Yes": wordTrue, "YES": wordTrue,
	"true": wordTrue, "True": wordTrue, "TRUE": wordTrue, "on": wordTrue, "On": wordTrue, "ON": wordTrue,
	"n": wordFalse, "N": wordFalse, "no": wordFalse, "No": wordFalse, "NO": wordFalse,
	"false": wordFalse, "False": wordFalse, "FALSE": wordFalse, "off": wordFalse, "Off": wordFalse, "OFF": wordFalse,
	"~": wordNull, "null": wordNull, "Null": wordNull, "NULL": wordNull,
	".nan": wordOther, ".NaN": wordOther, ".NAN": wordOther, ".inf": wordOther, ".Inf": wordOther,
	".INF": wordOther, "+.inf": wordOther, "+.Inf": wordOther, "+.INF": wordOther,
	"-.inf": wordOther, "-.Inf": wordOther, "-.INF": wordOther, "<<": wordOther,
}
