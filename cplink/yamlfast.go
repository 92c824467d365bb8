package cplink

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	yaml2 "go.yaml.in/yaml/v2"
)

// appendBlockYAML writes v (a resource's JSON tree, numbers typed by yamlTyped) as go-yaml
// v2's Marshal writes it, for the trees a resource makes: mappings, sequences of scalars and
// mappings, integers, booleans, nulls, and strings that go-yaml writes plain or, for RFC
// 3339 times, double-quoted. Anything else (a string go-yaml would quote or fold, a float,
// a sequence of sequences) reports false: the caller has go-yaml write the tree.
func appendBlockYAML(out []byte, v map[string]any) ([]byte, bool) {
	return appendMapping(out, v, 0, false)
}

// appendMapping writes m's entries in go-yaml's key order at indent; inSeq: the first
// entry follows a sequence's "- " on its line.
func appendMapping(out []byte, m map[string]any, indent int, inSeq bool) ([]byte, bool) {
	keys, ok := keyOrder(m)
	if !ok {
		return out, false
	}
	for i, k := range keys {
		if i > 0 || !inSeq {
			out = appendIndent(out, indent)
		}
		out = append(out, k...)
		out = append(out, ':')
		switch e := m[k].(type) {
		case map[string]any:
			if len(e) == 0 {
				out = append(out, " {}\n"...)
				continue
			}
			out = append(out, '\n')
			if out, ok = appendMapping(out, e, indent+2, false); !ok {
				return out, false
			}
		case []any:
			if len(e) == 0 {
				out = append(out, " []\n"...)
				continue
			}
			out = append(out, '\n')
			if out, ok = appendSequence(out, e, indent); !ok { // go-yaml does not indent a mapping's sequence
				return out, false
			}
		default:
			out = append(out, ' ')
			if out, ok = appendScalar(out, e); !ok {
				return out, false
			}
			out = append(out, '\n')
		}
	}
	return out, true
}

func appendSequence(out []byte, s []any, indent int) ([]byte, bool) {
	ok := true
	for _, e := range s {
		out = appendIndent(out, indent)
		out = append(out, "- "...)
		switch e := e.(type) {
		case map[string]any:
			if len(e) == 0 {
				out = append(out, "{}\n"...)
				continue
			}
			if out, ok = appendMapping(out, e, indent+2, true); !ok {
				return out, false
			}
		case []any:
			return out, false
		default:
			if out, ok = appendScalar(out, e); !ok {
				return out, false
			}
			out = append(out, '\n')
		}
	}
	return out, true
}

func appendIndent(out []byte, n int) []byte {
	for range n {
		out = append(out, ' ')
	}
	return out
}

func appendScalar(out []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(out, "null"...), true
	case bool:
		return strconv.AppendBool(out, v), true
	case int:
		return strconv.AppendInt(out, int64(v), 10), true
	case int64:
		return strconv.AppendInt(out, v, 10), true
	case uint64:
		return strconv.AppendUint(out, v, 10), true
	case string:
		switch {
		case plainString(v):
			return append(out, v...), true
		case timeString(v):
			out = append(out, '"')
			out = append(out, v...)
			return append(out, '"'), true
		}
	}
	return out, false
}

// plainString reports whether go-yaml writes s plain, erring towards no: letters, digits
// and . _ / - only, starting with a letter or a digit, not a word go-yaml reads as a boolean
// or null, and when starting with a digit not a number and without '-' (no date).
func plainString(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '/' || c == '-' || c == '_') {
			return false
		}
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9':
		if strings.ContainsAny(s, "-_") {
			return false
		}
		if _, err := strconv.ParseUint(s, 0, 64); err == nil {
			return false
		}
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return false
		}
		return true
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		switch strings.ToLower(s) {
		case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
			return false
		}
		return true
	}
	return false
}

// timeString reports whether s is an RFC 3339 time as encoding/json writes one (go-yaml
// reads it as a timestamp, so it writes it double-quoted).
func timeString(s string) bool {
	if len(s) < 20 || strings.ContainsAny(s, " \"\\") {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// keyOrders caches the order go-yaml writes a set of keys in (its own natural order, taken
// from it once per set: a resource kind's fields and a mesh's tag sets repeat).
var keyOrders sync.Map // keys sorted and joined by "\x00" -> []string in go-yaml's order

// maxKeyOrders bounds the cache; sets beyond it are ordered by go-yaml each time.
const maxKeyOrders = 4096

var keyOrdersLen atomic.Int64

// keyOrder is m's keys in go-yaml's order; false when a key is not one written plain.
func keyOrder(m map[string]any) ([]string, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !plainString(k) {
			return nil, false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	id := strings.Join(keys, "\x00")
	if o, ok := keyOrders.Load(id); ok {
		return o.([]string), true
	}
	order, ok := yamlKeyOrder(keys)
	if ok && keyOrdersLen.Add(1) <= maxKeyOrders {
		keyOrders.Store(id, order)
	}
	return order, ok
}

// yamlKeyOrder asks go-yaml the order it writes keys in: a mapping of them marshalled and
// read back in order.
func yamlKeyOrder(keys []string) ([]string, bool) {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[k] = i
	}
	b, err := yaml2.Marshal(m)
	if err != nil {
		return nil, false
	}
	var ms yaml2.MapSlice
	if err := yaml2.Unmarshal(b, &ms); err != nil || len(ms) != len(keys) {
		return nil, false
	}
	order := make([]string, len(ms))
	for i, it := range ms {
		k, ok := it.Key.(string)
		if !ok {
			return nil, false
		}
		order[i] = k
	}
	return order, true
}
