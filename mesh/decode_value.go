package mesh

import (
	"bytes"
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

	"github.com/kumadp/kuma-dp/internal/errtext"
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
	// byKey and elems index the plain values of raw by key and as list elements, built at
	// the first check (exactTag, exactElement).
	byKey    map[string]*plainIndex
	elems    *plainIndex
	keyScans int // keys looked up without byKey
	// key is the mapping key whose value is being decoded (listElement for a list element,
	// "" when unknown): a text field YAML read as a number or a boolean is checked against
	// the text written for it.
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
// as decoded) against the document's text: ok when a plain value written for the key is that
// text (`port: 1800`), so nothing is altered; otherwise raw is the text that would be altered
// (`version: 1.10` read as 1.1, `build: 010` as 8, `canary: yes` as true). With no document
// text (resources built in code) it accepts. Past the first few keys the document is
// scanned once for every key (byKey): a check costs a map lookup, not a pass over the
// document (a dataplane of 20,000 numeric tags took 550 s so).
func (d *decoder) exactTag(key, canonical string) (raw string, ok bool) {
	if d.raw == nil {
		return canonical, true
	}
	if d.byKey == nil && d.keyScans < 16 {
		// The first few keys are looked up where written, without an index (a document
		// usually has one or two such values: `port: 8080`).
		d.keyScans++
		var ix plainIndex
		scanKeyValues(d.raw, key, ix.add)
		return ix.check(canonical, true)
	}
	if d.byKey == nil {
		d.byKey = map[string]*plainIndex{}
		for _, m := range keyValueRE().FindAllSubmatch(d.raw, -1) {
			k := m[1]
			if k == nil {
				k = m[2]
			}
			if k == nil {
				k = m[3]
			}
			ix := d.byKey[string(k)]
			if ix == nil {
				ix = &plainIndex{}
				d.byKey[string(k)] = ix
			}
			ix.add(string(m[4]))
		}
	}
	return d.byKey[key].check(canonical, true)
}

// scanKeyValues calls add with every plain value written for key (`key: v`, `"key": v`,
// `{key: v}`), as keyValueRE finds them.
func scanKeyValues(raw []byte, key string, add func(string)) {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(key))
		if j < 0 {
			return
		}
		at, end := i+j, i+j+len(key)
		i = at + 1
		quote := byte(0)
		if at > 0 && (raw[at-1] == '"' || raw[at-1] == '\'') {
			quote, at = raw[at-1], at-1
			if end >= len(raw) || raw[end] != quote {
				continue
			}
			end++
		}
		if at > 0 && !strings.ContainsRune(" \t\n\r{,", rune(raw[at-1])) {
			continue
		}
		if end+1 >= len(raw) || raw[end] != ':' || raw[end+1] != ' ' && raw[end+1] != '\t' {
			continue
		}
		v := end + 1
		for v < len(raw) && (raw[v] == ' ' || raw[v] == '\t') {
			v++
		}
		w := v
		for w < len(raw) && !strings.ContainsRune(" \t\n\r\f\v,}]#", rune(raw[w])) {
			w++
		}
		if w > v {
			add(string(raw[v:w]))
		}
	}
}

// keyValueRE matches `key: value` in block (`  version: 1.10`) or flow (`{version: 1.10}`)
// style, the key plain or quoted, and captures the key (in one of three groups) and the
// value as written.
var keyValueRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)(?:^|[\s{,])(?:"([^"\n]*)"|'([^'\n]*)'|((?:[^\s:{},\[\]#"']|:[^\s{},\[\]#])+)):[ \t]+([^\s,}\]#]+)`)
})

// listElement is decoder.key while a list element is decoded.
const listElement = "\x00-"

// listElementRE matches a plain list element as written, in block (`- on`) or flow
// (`[on, 010]`) style.
var listElementRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)(?:^[ \t]*-[ \t]+|[\[,][ \t]*)([^\s,\]\[{}#'"][^\s,\]#]*)`)
})

// exactElement is exactTag for a list element.
func (d *decoder) exactElement(canonical string) (raw string, ok bool) {
	if d.raw == nil {
		return canonical, true
	}
	if d.elems == nil {
		d.elems = &plainIndex{}
		for _, m := range listElementRE().FindAllSubmatch(d.raw, -1) {
			d.elems.add(string(m[1]))
		}
	}
	// A list's elements are not all text (`- port: 80` is a mapping): no first-written
	// fallback.
	return d.elems.check(canonical, false)
}

// plainIndex is the plain values written in one place of a document (for a key, or as list
// elements), indexed by what YAML 1.1 reads them as.
type plainIndex struct {
	written map[string]bool
	num     map[float64]string // a value read as that number
	boolean map[bool]string    // a value read as that boolean
	first   string             // the first value written
}

func (ix *plainIndex) add(v string) {
	if v == "" || v[0] == '"' || v[0] == '\'' {
		return // quoted: a string, never converted
	}
	if ix.written == nil {
		ix.written, ix.num, ix.boolean, ix.first = map[string]bool{}, map[float64]string{}, map[bool]string{}, v
	}
	ix.written[v] = true
	for _, f := range yamlNumbers(v) {
		if _, seen := ix.num[f]; !seen {
			ix.num[f] = v
		}
	}
	switch strings.ToLower(v) {
	case "yes", "y", "on", "true":
		if _, seen := ix.boolean[true]; !seen {
			ix.boolean[true] = v
		}
	case "no", "n", "off", "false":
		if _, seen := ix.boolean[false]; !seen {
			ix.boolean[false] = v
		}
	}
}

// check is ok when canonical (a number or a boolean as decoded) is written as such, or
// nothing is written (nil ix); otherwise raw is the text YAML altered: one read as canonical,
// else (with orFirst) the first written, a form not told here.
func (ix *plainIndex) check(canonical string, orFirst bool) (raw string, ok bool) {
	if ix == nil || ix.written == nil || ix.written[canonical] {
		return canonical, true
	}
	if f, err := strconv.ParseFloat(canonical, 64); err == nil {
		if v, ok := ix.num[f]; ok {
			return v, false
		}
	} else if b, err := strconv.ParseBool(canonical); err == nil {
		if v, ok := ix.boolean[b]; ok {
			return v, false
		}
	}
	if !orFirst {
		return canonical, true
	}
	return ix.first, false
}

// yamlNumbers are the numbers YAML 1.1 may read the plain scalar v as (as a float and as an
// integer of any base: 010 is 10 and 8; 1_000 is 1000).
func yamlNumbers(v string) []float64 {
	var out []float64
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		out = append(out, f)
	}
	if i, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 0, 64); err == nil {
		out = append(out, float64(i))
	}
	return out
}

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
		switch d.key {
		case "":
		case listElement:
			if raw, ok := d.exactElement(text); !ok {
				d.errorf(path, raw, "YAML reads this value as %s %s, not the text written: quote it (%q)",
					typeName(n), text, raw)
				text = raw
			}
		default:
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
		d.key = listElement
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
// be quoted (its text would change). Keys are the process's one copy of each
// (strArena.key), values the file's one copy of each value seen lately (strArena.value):
// the pods' tags are copied before their sets are shared (settle), and a Kubernetes mesh
// repeats most values.
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
		strs := d.strs // the value is copied below, once
		d.strs = nil
		d.value(reflect.ValueOf(&s).Elem(), m[k], d.keyPath(path, k))
		d.strs = strs
		out = append(out, Tag{Key: d.strs.key(k), Value: s})
	}
	v.Set(reflect.ValueOf(d.settleTags(tagset.Sorted(out))))
}

// settleTags returns tags, whose values are the text's still, with its values copied (or
// the equal set of a replica decoded alone before: strArena.liveSet).
func (d *decoder) settleTags(tags Tags) Tags {
	if live := d.strs.liveSet(tags); live != nil {
		return live
	}
	for i := range tags {
		tags[i].Value = d.strs.value(tags[i].Value)
	}
	return tags
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
		tags = append(tags, Tag{Key: d.strs.key(k), Value: s})
	}
	return d.settleTags(tagset.Sorted(tags))
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
// the way (MetaExtra, DataplaneKept, NetworkingExtra, InboundExtra).
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

var (
	keptType      = reflect.TypeFor[*DataplaneKept]()
	dataplaneType = reflect.TypeFor[Dataplane]()
)

// fieldsOf lists the JSON names of t's fields, embedded structs' fields included.
func fieldsOf(t reflect.Type) *structFields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*structFields)
	}
	fs := &structFields{byName: map[string][]int{}}
	t0 := t
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
				if f.Type == keptType && t0 != dataplaneType {
					continue // a Dataplane's alone, in every kind's MetaExtra
				}
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
// It is errtext.Suggest, which the commands' config files share.
func Suggest(key string, known []string) string { return errtext.Suggest(key, known) }

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
