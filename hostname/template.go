package hostname

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"

	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/tagset"
)

// This file is the one hostname template engine of the project: Go text/template with a
// per-policy function map, so that every syntax of the design documents works:
//
//	{{service}}            the VirtualOutbound design: a function per name mapped in conf.tags
//	{{.service}}           Kuma: a data key per conf.parameters name
//	{{tag "version"}}      the VirtualHost draft: the tag function with the tag key
//	{{tag version}}        the VirtualHost draft literal forms, rewritten to {{tag "version"}}
//	{{kuma.io/zone}}       before parsing (text/template cannot parse them)
//
// Templates made only of text and simple references (the forms above) are compiled into a
// list of segments and rendered without text/template (one allocation per render, on the
// allocator's hot path); anything richer ({{if}}, pipelines, printf...) falls back to
// executing the parsed template with the values bound for that render.

// Kuma's rules for conf.parameters: a name of letters and digits (it is a template field),
// a tag key of the characters a tag key may hold.
var (
	parameterName = regexp.MustCompile(`^[a-zA-Z0-9]+$`)
	tagKeyChars   = regexp.MustCompile(`^[a-zA-Z0-9.\-_:/]+$`)
)

// TemplateError is a template that does not compile: Field is the field holding it
// (e.g. "conf.host"), Msg what text/template or our checks said.
type TemplateError struct {
	Field    string
	Template string
	Msg      string
}

func (e *TemplateError) Error() string {
	return e.Field + ": template: " + errtext.Clip(e.Msg, 2*errtext.MaxShown)
}

// MissingTagError says a tag needed by a template is absent from the tags it renders with.
type MissingTagError struct {
	Field string
	Key   string
}

func (e *MissingTagError) Error() string {
	return fmt.Sprintf("%s: tag %q is missing", e.Field, e.Key)
}

// RenderError is a template whose rendered value is not usable (not a hostname, not a port).
type RenderError struct {
	Field    string
	Rendered string
	Msg      string
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("%s: rendered %q: %s", e.Field, errtext.Clip(e.Rendered, errtext.MaxShown), errtext.Clip(e.Msg, 2*errtext.MaxShown))
}

// segment is one piece of a simple template: literal text, or a reference (a tag key for
// VirtualOutbound templates, a field or label for HostnameGenerator templates).
type segment struct {
	ref  int8 // 0: literal text; otherwise a reference kind
	text string
}

const refTag int8 = 1

// tmpl is one compiled template: the parsed text/template plus, when the template is
// simple, its segments (nil otherwise: render through text/template).
type tmpl struct {
	field string
	src   string
	t     *template.Template
	segs  []segment
	fast  bool
}

// VOTemplate is a VirtualOutbound's compiled host and port templates. It is immutable and
// safe for concurrent use: compile once per policy, render per tuple.
type VOTemplate struct {
	host, port tmpl
	// literalPort is the port when conf.port is a plain number (0 otherwise).
	literalPort uint32
	// vars maps every template variable name (function or data key) to its tag key.
	vars    map[string]string
	tagKeys []string
}

// voBuiltins are names a conf.tags/parameters variable can't take as a function.
var voBuiltins = map[string]bool{"tag": true}

// CompileVirtualOutbound compiles conf.host and conf.port. Errors are *TemplateError naming
// the field.
func CompileVirtualOutbound(c VirtualOutboundConf) (*VOTemplate, error) {
	vt := &VOTemplate{vars: map[string]string{}}
	keys := map[string]bool{}
	// Sorted iteration so that a conflict is reported the same way every time.
	tagKeys := make([]string, 0, len(c.Tags))
	for k := range c.Tags {
		tagKeys = append(tagKeys, k)
	}
	sort.Strings(tagKeys)
	for _, k := range tagKeys {
		name := c.Tags[k]
		if name == "" {
			return nil, &TemplateError{Field: "conf.tags", Template: k, Msg: fmt.Sprintf("tag %q maps to an empty name", k)}
		}
		if prev, dup := vt.vars[name]; dup && prev != k {
			return nil, &TemplateError{Field: "conf.tags", Template: name, Msg: fmt.Sprintf("name %q maps both %q and %q", name, prev, k)}
		}
		vt.vars[name] = k
		keys[k] = true
	}
	var paramErrs []error
	for i, p := range c.Parameters {
		if !parameterName.MatchString(p.Name) {
			paramErrs = append(paramErrs, &TemplateError{Field: fmt.Sprintf("conf.parameters[%d].name", i), Template: p.Name,
				Msg: fmt.Sprintf("name %q must consist of letters and digits only (as in Kuma)", p.Name)})
			continue
		}
		k := p.TagKey
		if k == "" {
			k = p.Name
		}
		if !tagKeyChars.MatchString(k) {
			paramErrs = append(paramErrs, &TemplateError{Field: fmt.Sprintf("conf.parameters[%d].tagKey", i), Template: k,
				Msg: fmt.Sprintf("tagKey %q is not a valid tag key (letters, digits and . - _ : / only, as in Kuma)", k)})
			continue
		}
		if prev, dup := vt.vars[p.Name]; dup && prev != k {
			return nil, &TemplateError{Field: fmt.Sprintf("conf.parameters[%d].name", i), Template: p.Name, Msg: fmt.Sprintf("name %q maps both %q and %q", p.Name, prev, k)}
		}
		vt.vars[p.Name] = k
		keys[k] = true
	}
	if len(paramErrs) > 0 {
		return nil, errors.Join(paramErrs...)
	}

	funcs := template.FuncMap{"tag": func(string) (string, error) { return "", nil }}
	for name := range vt.vars {
		if IsIdentifier(name) && !voBuiltins[name] {
			funcs[name] = func() (string, error) { return "", nil }
		}
	}

	// Both templates are compiled so that both problems are reported at once.
	var hostErr, portErr error
	vt.host, hostErr = vt.compile("conf.host", c.Host, funcs, keys)
	port := strings.TrimSpace(c.Port)
	if p, perr := strconv.ParseUint(port, 10, 32); perr == nil {
		if p < 1 || p > 65535 {
			portErr = &TemplateError{Field: "conf.port", Template: c.Port, Msg: "port must be 1-65535"}
		}
		vt.literalPort = uint32(p)
	} else {
		vt.port, portErr = vt.compile("conf.port", port, funcs, keys)
	}
	if hostErr != nil || portErr != nil {
		return nil, errors.Join(hostErr, portErr)
	}
	if err := checkTagKeys(c, keys); err != nil {
		return nil, err
	}
	vt.tagKeys = make([]string, 0, len(keys))
	for k := range keys {
		vt.tagKeys = append(vt.tagKeys, k)
	}
	sort.Strings(vt.tagKeys)
	return vt, nil
}

func (vt *VOTemplate) compile(field, src string, funcs template.FuncMap, keys map[string]bool) (tmpl, error) {
	if strings.TrimSpace(src) == "" {
		return tmpl{}, &TemplateError{Field: field, Template: src, Msg: "empty"}
	}
	t, err := parseTemplate(field, src, funcs, "tag")
	if err != nil {
		return tmpl{}, err
	}
	out := tmpl{field: field, src: src, t: t}
	var walkErr error
	walk(t.Tree.Root, func(n parse.Node) {
		switch n := n.(type) {
		case *parse.CommandNode:
			if k, ok := literalCall(n, "tag"); ok {
				keys[k] = true
			}
		case *parse.FieldNode:
			if _, ok := vt.vars[n.Ident[0]]; !ok && walkErr == nil {
				walkErr = &TemplateError{Field: field, Template: src, Msg: fmt.Sprintf(
					"no variable %q (declare it in conf.parameters or conf.tags)", n.Ident[0])}
			}
		}
	})
	if walkErr != nil {
		return tmpl{}, walkErr
	}
	out.segs, out.fast = simpleSegments(t.Tree.Root, func(c *parse.CommandNode) (segment, bool) {
		switch len(c.Args) {
		case 1:
			switch a := c.Args[0].(type) {
			case *parse.FieldNode:
				if len(a.Ident) == 1 {
					return segment{ref: refTag, text: vt.vars[a.Ident[0]]}, true
				}
			case *parse.IdentifierNode:
				if k, ok := vt.vars[a.Ident]; ok && !voBuiltins[a.Ident] {
					return segment{ref: refTag, text: k}, true
				}
			}
		case 2:
			if k, ok := literalCall(c, "tag"); ok {
				return segment{ref: refTag, text: k}, true
			}
		}
		return segment{}, false
	})
	return out, nil
}

// MaxTagKeys and MaxTagKeyBytes bound the tag keys a VirtualOutbound's templates read
// (conf.tags, conf.parameters, {{tag "x"}}): every tuple's key spells them all, so without a
// bound 3,000 unused parameters made each tuple's key ~150 KB (10,000 dataplanes: 19 s and
// 3.7 GB). Kuma's and the designs' templates read 1-4 (kuma.io/service is 15 bytes).
const (
	MaxTagKeys     = 16
	MaxTagKeyBytes = 512
)

func checkTagKeys(c VirtualOutboundConf, keys map[string]bool) error {
	field := "conf.host"
	switch {
	case len(c.Parameters) > 0:
		field = "conf.parameters"
	case len(c.Tags) > 0:
		field = "conf.tags"
	}
	if len(keys) > MaxTagKeys {
		return &TemplateError{Field: field, Msg: fmt.Sprintf("the templates read %d tag keys: at most %d", len(keys), MaxTagKeys)}
	}
	n := 0
	for k := range keys {
		n += len(k)
	}
	if n > MaxTagKeyBytes {
		return &TemplateError{Field: field, Msg: fmt.Sprintf("the tag keys the templates read are %d bytes together: at most %d", n, MaxTagKeyBytes)}
	}
	return nil
}

// TagKeys is the sorted set of tag keys the templates may need: conf.tags keys,
// conf.parameters tag keys and the literal arguments of {{tag "x"}} calls.
func (vt *VOTemplate) TagKeys() []string { return vt.tagKeys }

// Render renders host and port for one tuple of tags. The host is lower-cased, without a
// final dot, and a valid hostname; the port is 1-65535.
func (vt *VOTemplate) Render(tags Tags) (host string, port uint32, err error) {
	var buf [128]byte
	b, port, err := vt.RenderAppend(buf[:0], tags)
	if err != nil {
		return "", 0, err
	}
	return string(b), port, nil
}

// RenderAppend is Render appending the host to dst (so that a caller can keep it in one
// string with other text); on an error dst is returned unchanged.
func (vt *VOTemplate) RenderAppend(dst []byte, tags Tags) (out []byte, port uint32, err error) {
	start := len(dst)
	b, err := vt.exec(&vt.host, tags, dst)
	if err != nil {
		return dst, 0, err
	}
	h := bytes.TrimSuffix(b[start:], []byte{'.'})
	lowerASCII(h)
	if err := validHostname(h); err != nil {
		return dst, 0, &RenderError{Field: "conf.host", Rendered: string(h), Msg: err.Error()}
	}
	b = b[:start+len(h)]
	if vt.literalPort != 0 {
		return b, vt.literalPort, nil
	}
	var pbuf [16]byte
	pb, err := vt.exec(&vt.port, tags, pbuf[:0])
	if err != nil {
		return dst, 0, err
	}
	p, perr := parsePort(string(pb))
	if perr != nil {
		return dst, 0, &RenderError{Field: "conf.port", Rendered: string(pb), Msg: perr.Error()}
	}
	return b, p, nil
}

var errNotPort = errors.New("not a port 1-65535")

func parsePort(s string) (uint32, error) {
	p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return 0, errNotPort
	}
	return uint32(p), nil
}

// exec appends the rendering of one template to b.
func (vt *VOTemplate) exec(t *tmpl, tags Tags, b []byte) ([]byte, error) {
	if t.fast {
		for _, s := range t.segs {
			if s.ref == 0 {
				b = append(b, s.text...)
				continue
			}
			v, ok := tags.Get(s.text)
			if !ok {
				return nil, &MissingTagError{Field: t.field, Key: s.text}
			}
			b = append(b, v...)
		}
		return b, nil
	}
	// Slow path: bind this render's values to the functions of a clone.
	field := t.field
	lookup := func(k string) (string, error) {
		v, ok := tags.Get(k)
		if !ok {
			return "", &MissingTagError{Field: field, Key: k}
		}
		return v, nil
	}
	funcs := template.FuncMap{"tag": lookup}
	data := make(map[string]string, len(vt.vars))
	for name, k := range vt.vars {
		if v, ok := tags.Get(k); ok {
			data[name] = v
		}
		if IsIdentifier(name) && !voBuiltins[name] {
			k := k
			funcs[name] = func() (string, error) { return lookup(k) }
		}
	}
	out, err := execSlow(t, funcs, data)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// execSlow executes the parsed template of t on a clone carrying funcs.
// It never sees the caller's stack buffer, so that buffer stays on the stack.
func execSlow(t *tmpl, funcs template.FuncMap, data any) ([]byte, error) {
	c, err := t.t.Clone()
	if err != nil {
		return nil, err
	}
	w := &boundedWriter{limit: MaxRenderBytes}
	if err := c.Funcs(funcs).Execute(w, data); err != nil {
		if errors.Is(err, errRenderTooLarge) {
			return nil, &TemplateError{Field: t.field, Template: t.src, Msg: errRenderTooLarge.Error()}
		}
		var mt *MissingTagError
		if errors.As(err, &mt) {
			return nil, mt
		}
		var ml *MissingLabelError
		if errors.As(err, &ml) {
			return nil, ml
		}
		return nil, &TemplateError{Field: t.field, Template: t.src, Msg: stripTemplatePrefix(err.Error(), t.field)}
	}
	return w.buf.Bytes(), nil
}

// MaxRenderBytes bounds what one render may produce, and every string a template function
// returns: a hostname is at most 253 bytes and a port 5, so a render past this is refused at
// once instead of growing (variables can be reassigned, so without a bound a few dozen
// doublings of a string take all memory).
const MaxRenderBytes = 1024

var errRenderTooLarge = fmt.Errorf("renders more than %d bytes: not a hostname", MaxRenderBytes)

// boundedWriter is the render's output, refusing to grow past limit.
type boundedWriter struct {
	buf   bytes.Buffer
	limit int
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.limit {
		return 0, errRenderTooLarge
	}
	return w.buf.Write(p)
}

// boundedFuncs replaces text/template's builtins that build strings (print, printf,
// println, and the escapers html, js and urlquery, which grow their input) with versions
// whose result is refused past MaxRenderBytes: a value stored in a variable never reaches
// the output writer, so the writer's bound alone would not stop it from growing.
var boundedFuncs = template.FuncMap{
	"printf":   func(format string, args ...any) (string, error) { return bounded(safePrintf(format, args...)) },
	"print":    func(args ...any) (string, error) { return bounded(fmt.Sprint(args...), nil) },
	"println":  func(args ...any) (string, error) { return bounded(fmt.Sprintln(args...), nil) },
	"html":     func(args ...any) (string, error) { return bounded(template.HTMLEscaper(args...), nil) },
	"js":       func(args ...any) (string, error) { return bounded(template.JSEscaper(args...), nil) },
	"urlquery": func(args ...any) (string, error) { return bounded(template.URLQueryEscaper(args...), nil) },
}

func bounded(s string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if len(s) > MaxRenderBytes {
		return "", errRenderTooLarge
	}
	return s, nil
}

// parseTemplate rewrites the VirtualHost draft's unquoted forms and parses src, turning a parse error
// into a *TemplateError.
//
// Templates come from policies, outside input: loops, template calls and definitions are
// refused, printf refuses huge widths and every builtin that builds a string is bounded
// (boundedFuncs), so that no policy can make a render run long or allocate much: without
// loops, a render takes at most as many steps as the template has nodes.
func parseTemplate(field, src string, funcs template.FuncMap, quoteFn string) (*template.Template, error) {
	if len(src) > MaxTemplateBytes {
		return nil, &TemplateError{Field: field, Template: src, Msg: fmt.Sprintf("longer than %d bytes", MaxTemplateBytes)}
	}
	fm := template.FuncMap{}
	for k, v := range boundedFuncs {
		fm[k] = v
	}
	for k, v := range funcs {
		fm[k] = v
	}
	t, err := template.New(field).Funcs(fm).Parse(rewriteBare(src, quoteFn))
	if err != nil {
		return nil, &TemplateError{Field: field, Template: src, Msg: stripTemplatePrefix(err.Error(), field)}
	}
	if len(t.Templates()) > 1 {
		return nil, &TemplateError{Field: field, Template: src, Msg: "define and block are not supported"}
	}
	var bad string
	nodes := 0
	walk(t.Tree.Root, func(n parse.Node) {
		nodes++
		switch n.(type) {
		case *parse.RangeNode:
			bad = "range"
		case *parse.TemplateNode:
			bad = "template"
		case *parse.BreakNode, *parse.ContinueNode:
			bad = "break and continue"
		}
	})
	if bad != "" {
		return nil, &TemplateError{Field: field, Template: src, Msg: bad + " is not supported"}
	}
	if nodes > MaxTemplateNodes {
		return nil, &TemplateError{Field: field, Template: src, Msg: fmt.Sprintf(
			"more than %d nodes (actions, branches, arguments): too complex for a hostname", MaxTemplateNodes)}
	}
	return t, nil
}

// MaxTemplateBytes and MaxTemplateNodes bound a template when it is compiled. A render
// walks each node at most once (no loops), so they bound what one render costs: without
// them a policy of 20,000 nested ifs (320 KB) cost ~5 ms a render, 49 s of CPU for a mesh
// of 10,000 dataplanes at each change. A hostname is at most 253 bytes; the designs' and
// Kuma's templates have 10-30 nodes ({{if .port}}{{.port}}{{else}}8080{{end}}: 12).
const (
	MaxTemplateBytes = 2048
	MaxTemplateNodes = 128
)

// safePrintf is fmt.Sprintf refusing widths and precisions over 3 digits.
func safePrintf(format string, args ...any) (string, error) {
	digits := 0
	for i := 0; i < len(format); i++ {
		if c := format[i]; c >= '0' && c <= '9' {
			if digits++; digits > 3 {
				return "", fmt.Errorf("printf: width or precision too large in %q", format)
			}
		} else {
			digits = 0
		}
		if format[i] == '*' {
			return "", fmt.Errorf("printf: * width not supported in %q", format)
		}
	}
	return fmt.Sprintf(format, args...), nil
}

// stripTemplatePrefix turns `template: conf.host:1: function "x" not defined` into
// `function "x" not defined`.
func stripTemplatePrefix(msg, name string) string {
	msg = strings.TrimPrefix(msg, "template: ")
	if rest, ok := strings.CutPrefix(msg, name+":"); ok {
		// Skip "line:" or "line:col:" and an "executing ..." context.
		for i := 0; i < 2; i++ {
			j := strings.IndexByte(rest, ':')
			if j <= 0 {
				break
			}
			if _, err := strconv.Atoi(rest[:j]); err != nil {
				break
			}
			rest = rest[j+1:]
		}
		msg = strings.TrimSpace(rest)
	}
	if m := execContext().FindStringIndex(msg); m != nil {
		msg = msg[m[1]:]
	}
	return msg
}

// execContext is text/template's `executing "name" at <node>: ` prefix.
var execContext = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^executing ".*?" at <.*?>: `) })

// CheckStandIns renders the templates with stand-in values for every tag ("a1" in the host,
// "80" in the port), so that templates whose fixed parts can never give a hostname or a
// port are refused when loaded rather than on every render.
func (vt *VOTemplate) CheckStandIns() error {
	host, port := Tags{}, Tags{}
	for _, k := range vt.tagKeys {
		host, port = append(host, tagset.Tag{Key: k, Value: "a1"}), append(port, tagset.Tag{Key: k, Value: "80"})
	}
	host, port = tagset.Sorted(host), tagset.Sorted(port)
	var hostErr, portErr error
	if _, _, err := vt.Render(host); err != nil {
		var re *RenderError
		if !errors.As(err, &re) || re.Field != "conf.port" {
			hostErr = err
		}
	}
	if vt.literalPort == 0 {
		if pb, err := vt.exec(&vt.port, port, nil); err != nil {
			portErr = err
		} else if _, err := parsePort(string(pb)); err != nil {
			portErr = &RenderError{Field: "conf.port", Rendered: string(pb), Msg: err.Error()}
		}
	}
	return errors.Join(hostErr, portErr) // both problems at once
}
