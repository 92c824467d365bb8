package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kumadp/kuma-dp/internal/errtext"
)

// Scalars are the types written as one value in a config file that are not strings, numbers
// or booleans (a duration, an address range): Parse checks the text and returns what the
// type's JSON decoding takes, or an error naming what was wanted. A time.Duration is one
// already ("30s").
type Scalars map[reflect.Type]func(text string) (any, error)

// ReadFile reads a config file (YAML or JSON) over cfg, a pointer to a struct whose JSON
// names are the file's keys. Every problem is reported at once, each with its field path,
// line and value: an unknown key with the closest known one ("did you mean proxyPort?") or
// the section it belongs in; a value of the wrong type. Values are taken exactly as written
// (no YAML 1.1 coercion of a string field). go.yaml.in/yaml/v3 is used for its node tree,
// which carries the line of every key.
func ReadFile(path string, cfg any, scalars Scalars) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return decode(b, cfg, scalars)
}

// parseDuration reads a time.Duration written "30s".
func parseDuration(text string) (any, error) {
	d, err := time.ParseDuration(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("want a duration like \"30s\" (value %q)", text)
	}
	return int64(d), nil
}

func decode(b []byte, cfg any, scalars Scalars) error {
	t := reflect.TypeOf(cfg).Elem()
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file: defaults
	}
	c := configChecker{index: fieldIndex(t, ""), scalars: scalars}
	v := c.value(doc.Content[0], t, "")
	if len(c.errs) > 0 {
		return errors.New(strings.Join(c.errs, "\n"))
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(cfg); err != nil {
		return err // the checks above leave nothing for this to find
	}
	return nil
}

type configChecker struct {
	index   map[string][]string // key -> the paths of the sections that have it
	scalars Scalars
	errs    []string
}

func (c *configChecker) errorf(n *yaml.Node, path, format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf("%s (line %d): %s", path, n.Line, fmt.Sprintf(format, args...)))
}

// jsonName is a struct field's name in the file.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		name = f.Name
	}
	return name
}

// fieldIndex maps every key of every section to the sections holding it, to tell a key in
// the wrong section where it belongs.
func fieldIndex(t reflect.Type, prefix string) map[string][]string {
	out := map[string][]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		if prefix != "" {
			out[name] = append(out[name], prefix)
		}
		if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 {
			for k, v := range fieldIndex(f.Type, join(prefix, name)) {
				out[k] = append(out[k], v...)
			}
		}
	}
	return out
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// value checks n against t and returns it as JSON would carry it (nil after an error).
func (c *configChecker) value(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	parse, ok := c.scalars[t]
	if !ok && t == reflect.TypeFor[time.Duration]() {
		parse, ok = parseDuration, true
	}
	if ok {
		if n.Kind != yaml.ScalarNode {
			c.errorf(n, path, "want a single value, not a %s", kindName(n))
			return nil
		}
		v, err := parse(n.Value)
		if err != nil {
			c.errorf(n, path, "%v", err)
			return nil
		}
		return v
	}
	switch {
	case t.Kind() == reflect.Struct:
		return c.mapping(n, t, path)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.errorf(n, path, "want a mapping of names to values")
			return nil
		}
		out := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			out[n.Content[i].Value] = c.value(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value)
		}
		return out
	case t.Kind() == reflect.Slice:
		if n.Kind == yaml.ScalarNode { // one value for a list: a list of one
			return []any{c.value(n, t.Elem(), path)}
		}
		if n.Kind != yaml.SequenceNode {
			c.errorf(n, path, "want a list")
			return nil
		}
		var out []any
		for i, e := range n.Content {
			out = append(out, c.value(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)))
		}
		return out
	}
	if n.Kind != yaml.ScalarNode {
		c.errorf(n, path, "want a single value, not a %s", kindName(n))
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		return n.Value // exactly as written
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if err != nil {
			c.errorf(n, path, "want true or false (value %q)", n.Value)
			return nil
		}
		return b
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		if _, err := strconv.ParseInt(n.Value, 10, t.Bits()); err != nil {
			c.errorf(n, path, "want a whole number (value %q)", n.Value)
			return nil
		}
		return json.Number(n.Value)
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		if _, err := strconv.ParseUint(n.Value, 10, t.Bits()); err != nil {
			c.errorf(n, path, "want a whole number from 0 to %d (value %q)", uint64(1)<<t.Bits()-1, n.Value)
			return nil
		}
		return json.Number(n.Value)
	}
	return n.Value
}

func (c *configChecker) mapping(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind != yaml.MappingNode {
		c.errorf(n, orTop(path), "want a mapping (a section of settings), not a %s", kindName(n))
		return nil
	}
	fields := map[string]reflect.StructField{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		fields[jsonName(f)] = f
		names = append(names, jsonName(f))
	}
	sort.Strings(names)
	out := map[string]any{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		f, ok := fields[k.Value]
		if !ok {
			c.unknown(k, p, path, names)
			continue
		}
		if x := c.value(v, f.Type, p); x != nil {
			out[k.Value] = x
		}
	}
	return out
}

// unknown reports a key its section lacks: the section it belongs in, or the closest key.
func (c *configChecker) unknown(k *yaml.Node, p, section string, names []string) {
	var elsewhere []string
	for _, s := range c.index[k.Value] {
		if s != section {
			elsewhere = append(elsewhere, s+"."+k.Value)
		}
	}
	switch {
	case len(elsewhere) > 0:
		c.errorf(k, p, "unknown field here: it belongs in %s", strings.Join(elsewhere, " or "))
	case errtext.Suggest(k.Value, names) != "":
		c.errorf(k, p, "unknown field, did you mean %s?", errtext.Suggest(k.Value, names))
	default:
		c.errorf(k, p, "unknown field (known here: %s)", strings.Join(names, ", "))
	}
}

func orTop(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "single value"
}
