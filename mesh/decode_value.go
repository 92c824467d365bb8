package mesh

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/tagset"
)

// This file decodes a generic document (what JSON decoding into `any` gives, with
// json.Number for numbers) into the typed resources, walking the document against the
// target's json tags. Unlike json.Unmarshal it reports every problem of a document, each
// with its field path and value: unknown fields (with a "did you mean" suggestion) and
// values of the wrong type. Scalars are coerced where YAML users expect it: a number or a
// boolean where a string is expected (`version: 2`, `port: 8080`), a numeric string where a
// number is expected (`port: "8080"`).

// decoder collects the errors of one document.
type decoder struct {
	source     Source
	kind, name string
	errs       Errors
	// quick: the first pass over a document, which builds no paths and sorts no keys, and
	// only notes that something failed (failed); the document is then decoded again from a
	// fresh parse without quick, reporting every problem in order with its path. Nothing
	// decoded depends on the order of keys, so a quick pass that fails nothing decodes the
	// same resource.
	quick, failed bool
	// raw is the document's text: a tag value YAML read as a number or a boolean is checked
	// against what was written (exactTag).
	raw []byte
	// key is the mapping key whose value is being decoded ("" for a list element): a text
	// field YAML read as a number or a boolean is checked against the text written for it.
	key string
	// strs, when set, holds copies of the strings stored in the resource (see strArena),
	// so that the resource does not keep the document's text alive.
	strs *strArena
}

func (d *decoder) errorf(path, value, format string, args ...any) {
	if d.quick {
		d.failed = true
		return
	}
	if len(d.errs) > MaxFileErrors {
		return // Decode lists MaxFileErrors and says it stopped
	}
	d.errs = append(d.errs, &FieldError{Source: d.source.String(), Kind: d.kind, Name: d.name,
		Path: path, Value: redact(path, value), Msg: fmt.Sprintf(format, args...)})
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawType      = reflect.TypeFor[json.RawMessage]()
	bytesType    = reflect.TypeFor[[]byte]()
	selectorType = reflect.TypeFor[Selector]()
	tagsType     = reflect.TypeFor[Tags]()
)

// exactTag checks a tag value that YAML read as a number or a boolean (canonical: its text
// as decoded) against the document's text: ok when every plain value written for the key
// is that text (`port: 1800`), so nothing is altered; otherwise raw is the text that would
// be altered (`version: 1.10` read as 1.1, `build: 010` as 8, `canary: yes` as true). With no
// document text (resources built in code) it accepts.
func (d *decoder) exactTag(key, canonical string) (raw string, ok bool) {
	if d.raw == nil {
		return canonical, true
	}
	re := tagValueRE(key)
	var other string
	for _, m := range re.FindAllSubmatch(d.raw, -1) {
		v := string(m[1])
		switch {
		case v == "" || v[0] == '"' || v[0] == '\'':
			// quoted: a string, never converted
		case v == canonical:
			return canonical, true // written as read
		case readsAs(v, canonical):
			return v, false // this is the one YAML changed
		case other == "":
			other = v
		}
	}
	if other == "" {
		return canonical, true
	}
	return other, false
}

// readsAs reports whether YAML 1.1 reads the plain scalar raw as canonical (a number or a
// boolean in JSON's text): 1.10 as 1.1, 010 as 8, yes as true.
func readsAs(raw, canonical string) bool {
	if f, err := strconv.ParseFloat(canonical, 64); err == nil {
		if g, err := strconv.ParseFloat(raw, 64); err == nil && g == f {
			return true
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(raw, "_", ""), 0, 64)
		return err == nil && float64(i) == f
	}
	switch strings.ToLower(raw) {
	case "yes", "y", "on", "true":
		return canonical == "true"
	case "no", "n", "off", "false":
		return canonical == "false"
	}
	return false
}

// tagValueRE matches `key: value` in block (`  version: 1.10`) or flow (`{version: 1.10}`)
// style and captures the value as written.
func tagValueRE(key string) *regexp.Regexp {
	if re, ok := tagREs.Load(key); ok {
		return re.(*regexp.Regexp)
	}
	k := regexp.QuoteMeta(key)
	re := regexp.MustCompile(`(?m)(?:^|[\s{,])["']?` + k + `["']?:[ \t]+([^\s,}\]#]+)`)
	tagREs.Store(key, re)
	return re
}

var tagREs sync.Map

// value decodes node n into v (settable).
func (d *decoder) value(v reflect.Value, n any, path string) {
	if n == nil {
		return // YAML `key:` with nothing: keep the zero value
	}
	if d.specialValue(v, n, path) {
		return
	}
	switch v.Kind() {
	case reflect.String:
		d.stringValue(v, n, path)
	case reflect.Uint32, reflect.Uint64, reflect.Int, reflect.Int64:
		d.numberValue(v, n, path)
	case reflect.Bool:
		d.boolValue(v, n, path)
	case reflect.Interface:
		v.Set(reflect.ValueOf(n))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.value(p.Elem(), n, path)
		v.Set(p)
	case reflect.Slice:
		if v.Type() == tagsType {
			d.tagsValue(v, n, path)
			return
		}
		d.sliceValue(v, n, path)
	case reflect.Map:
		d.mapValue(v, n, path)
	case reflect.Struct:
		d.structValue(v, n, path)
	default:
		d.errorf(path, "", "cannot decode into %s", v.Type())
	}
}

// specialValue decodes the types written as text - a time, raw JSON, base64 bytes - and
// reports whether v was one of them.
func (d *decoder) specialValue(v reflect.Value, n any, path string) bool {
	switch v.Type() {
	case timeType:
		s, ok := n.(string)
		t, err := time.Parse(time.RFC3339, s)
		if !ok || err != nil {
			d.errorf(path, scalarText(n), "not an RFC 3339 time (e.g. 2024-01-02T15:04:05Z)")
			return true
		}
		v.Set(reflect.ValueOf(t))
		return true
	case rawType:
		b, err := json.Marshal(n)
		if err != nil {
			d.errorf(path, "", "%v", err)
			return true
		}
		v.SetBytes(b)
		return true
	case bytesType:
		s, ok := n.(string)
		if !ok {
			d.errorf(path, scalarText(n), "expected base64-encoded text, got %s", typeName(n))
			return true
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			d.errorf(path, s, "not base64-encoded text")
			return true
		}
		v.SetBytes(b)
		return true
	}
	return false
}

func (d *decoder) stringValue(v reflect.Value, n any, path string) {
	switch n := n.(type) {
	case string:
		v.SetString(d.strs.copy(n))
	case json.Number, bool:
		// YAML 1.1 read a plain scalar as a number or a boolean: kept as text when that is
		// the text written (`port: 8080`, `name: 10`), refused otherwise (`name: y` read as
		// true, `name: 010` as 8), with the text written kept so that later checks do not
		// report what the user did not write.
		text := scalarText(n)
		if d.key != "" {
			if raw, ok := d.exactTag(d.key, text); !ok {
				d.errorf(path, raw, "YAML reads this value as %s %s, not the text written: quote it (%s: %q)",
					typeName(n), text, d.key, raw)
				text = raw
			}
		}
		v.SetString(d.strs.copy(text))
	default:
		d.errorf(path, "", "expected a string, got %s", typeName(n))
	}
}

// numberValue decodes an integer or a whole number, from a number or its text.
func (d *decoder) numberValue(v reflect.Value, n any, path string) {
	var text string
	switch n := n.(type) {
	case json.Number:
		text = n.String()
	case string:
		text = strings.TrimSpace(n)
	default:
		d.errorf(path, "", "expected a number, got %s", typeName(n))
		return
	}
	if v.Kind() == reflect.Int || v.Kind() == reflect.Int64 {
		i, err := strconv.ParseInt(text, 10, v.Type().Bits())
		if err != nil {
			d.errorf(path, text, "expected an integer")
			return
		}
		v.SetInt(i)
		return
	}
	u, err := strconv.ParseUint(text, 10, v.Type().Bits())
	if err != nil {
		d.errorf(path, text, "expected a whole number 0-%d", uint64(1)<<v.Type().Bits()-1)
		return
	}
	v.SetUint(u)
}

func (d *decoder) boolValue(v reflect.Value, n any, path string) {
	switch n := n.(type) {
	case bool:
		v.SetBool(n)
	case string:
		b, err := strconv.ParseBool(n)
		if err != nil {
			d.errorf(path, n, "expected true or false")
			return
		}
		v.SetBool(b)
	default:
		d.errorf(path, scalarText(n), "expected true or false, got %s", typeName(n))
	}
}

func (d *decoder) sliceValue(v reflect.Value, n any, path string) {
	list, ok := n.([]any)
	if !ok {
		d.errorf(path, scalarText(n), "expected a list, got %s", typeName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(list), len(list))
	for i, e := range list {
		d.key = ""
		d.value(s.Index(i), e, d.indexPath(path, i))
	}
	v.Set(s)
}

// mapValue decodes a mapping into a map, keys in order.
func (d *decoder) mapValue(v reflect.Value, n any, path string) {
	m, ok := n.(map[string]any)
	if !ok {
		d.errorf(path, scalarText(n), "expected a mapping, got %s", typeName(n))
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), len(m))
	for _, k := range d.keys(m) {
		e := reflect.New(v.Type().Elem()).Elem()
		d.key = k
		d.value(e, m[k], d.keyPath(path, k))
		out.SetMapIndex(reflect.ValueOf(d.strs.share(k)).Convert(v.Type().Key()), e)
	}
	v.Set(out)
}

// tagsValue decodes a mapping into Tags; a tag value YAML read as a number or a boolean must
// be quoted (its text would change).
func (d *decoder) tagsValue(v reflect.Value, n any, path string) {
	m, ok := n.(map[string]any)
	if !ok {
		d.errorf(path, scalarText(n), "expected a mapping, got %s", typeName(n))
		return
	}
	out := make(Tags, 0, len(m))
	if d.quick {
		v.Set(reflect.ValueOf(d.quickTags(out, m)))
		return
	}
	for _, k := range d.keys(m) {
		switch n := m[k].(type) {
		case json.Number, bool:
			if raw, ok := d.exactTag(k, scalarText(n)); !ok {
				d.errorf(d.keyPath(path, k), raw, "YAML reads this tag value as %s %s, not the text written: quote it (%s: %q)",
					typeName(n), scalarText(n), k, raw)
				continue
			}
		}
		var s string
		d.key = k
		d.value(reflect.ValueOf(&s).Elem(), m[k], d.keyPath(path, k))
		out = append(out, Tag{Key: d.strs.share(k), Value: s})
	}
	v.Set(reflect.ValueOf(tagset.Sorted(out)))
}

// quickTags fills the common tag set without reflection; a value that needs a word marks
// the decoding failed (the careful pass explains it).
func (d *decoder) quickTags(tags Tags, m map[string]any) Tags {
	for k, n := range m {
		var s string
		switch n := n.(type) {
		case string:
			s = n
		case json.Number:
			s = n.String()
			if _, ok := d.exactTag(k, s); !ok {
				d.failed = true
			}
		case bool:
			s = strconv.FormatBool(n)
			if _, ok := d.exactTag(k, s); !ok {
				d.failed = true
			}
		case nil:
		default:
			d.failed = true
		}
		tags = append(tags, Tag{Key: d.strs.share(k), Value: d.strs.copy(s)})
	}
	return tagset.Sorted(tags)
}

func (d *decoder) structValue(v reflect.Value, n any, path string) {
	m, ok := n.(map[string]any)
	if !ok {
		d.errorf(path, scalarText(n), "expected a mapping, got %s", typeName(n))
		return
	}
	if v.Type() == selectorType {
		m = foldSelector(m)
	}
	d.fields(v, m, path, nil)
}

// fields decodes mapping m into struct v; keys in extra are accepted and skipped.
func (d *decoder) fields(v reflect.Value, m map[string]any, path string, extra map[string]bool) {
	fs := fieldsOf(v.Type())
	for _, k := range d.keys(m) {
		idx, ok := fs.byName[k]
		if !ok {
			if !extra[k] {
				d.unknown(d.keyPath(path, k), k, fs.names)
			}
			continue
		}
		d.key = k
		d.value(fieldOf(v, idx), m[k], d.keyPath(path, k))
	}
}

// fieldOf is v.FieldByIndex(idx), allocating the embedded structs behind nil pointers on
// the way (DataplaneKept, NetworkingExtra, InboundExtra).
func fieldOf(v reflect.Value, idx []int) reflect.Value {
	for i, x := range idx {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// unknown reports an unknown field, suggesting the closest known one.
func (d *decoder) unknown(path, key string, known []string) {
	if d.quick {
		d.failed = true
		return
	}
	if len(d.errs) > MaxFileErrors {
		return // not listed: no suggestion to look for
	}
	if s := Suggest(key, known); s != "" {
		d.errorf(path, "", "unknown field, did you mean %s?", s)
		return
	}
	d.errorf(path, "", "unknown field (known: %s)", strings.Join(known, ", "))
}

// foldSelector accepts the VirtualOutbound design's selectors as written there: the tags at the indentation of
// `match:` (so YAML reads `match: null` plus sibling keys). Those keys become the match.
func foldSelector(m map[string]any) map[string]any {
	mv, has := m["match"]
	if !has || mv != nil || len(m) == 1 {
		return m
	}
	match := make(map[string]any, len(m)-1)
	for k, v := range m {
		if k != "match" {
			match[k] = v
		}
	}
	return map[string]any{"match": match}
}

type structFields struct {
	byName map[string][]int
	names  []string // sorted, for messages
}

var fieldCache sync.Map // reflect.Type -> *structFields

// fieldsOf lists the JSON names of t's fields, embedded structs' fields included.
func fieldsOf(t reflect.Type) *structFields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*structFields)
	}
	fs := &structFields{byName: map[string][]int{}}
	var add func(t reflect.Type, prefix []int)
	add = func(t reflect.Type, prefix []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(append([]int(nil), prefix...), i)
			tag := f.Tag.Get("json")
			if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
				add(f.Type, idx)
				continue
			}
			if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
				add(f.Type.Elem(), idx) // allocated when one of its fields is decoded (fieldOf)
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if !f.IsExported() || name == "-" || name == "" {
				continue
			}
			fs.byName[name] = idx
			fs.names = append(fs.names, name)
		}
	}
	add(t, nil)
	sort.Strings(fs.names)
	fieldCache.Store(t, fs)
	return fs
}

// Suggest returns the known name closest to key, if close enough to be a likely typo (the
// "did you mean" of every error about an unknown name: resource fields, kinds, config keys).
func Suggest(key string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		if dist := editDistance(strings.ToLower(key), strings.ToLower(k)); dist < bestD {
			best, bestD = k, dist
		}
	}
	limit := 2
	if l := len(key) / 3; l > limit {
		limit = l
	}
	if bestD <= limit && bestD < len(key) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keys are m's keys: sorted (errors come in order), or as they come in a quick pass.
func (d *decoder) keys(m map[string]any) []string {
	if !d.quick {
		return sortedKeys(m)
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// keyPath and indexPath build paths, except in a quick pass (which reports no paths).
func (d *decoder) keyPath(path, key string) string {
	if d.quick {
		return ""
	}
	return keyPath(path, key)
}

func (d *decoder) indexPath(path string, i int) string {
	if d.quick {
		return ""
	}
	return path + "[" + strconv.Itoa(i) + "]"
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// keyPath appends a mapping key to a path: `a.b`, or `a["kuma.io/service"]` for keys that
// are not plain words.
func keyPath(path, key string) string {
	if isIdentifier(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func typeName(n any) string {
	switch n.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", n)
}

// scalarText is the text of a scalar node for error values; empty for collections.
func scalarText(n any) string {
	switch n := n.(type) {
	case string:
		return n
	case json.Number:
		return n.String()
	case bool:
		return strconv.FormatBool(n)
	}
	return ""
}
