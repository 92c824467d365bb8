package hostname

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"
)

// HGTemplate is a compiled HostnameGenerator template (the MeshExternalService design): `{{ name }}`,
// `{{ label "x" }}`, and the fields .Name, .DisplayName, .Mesh, .Zone, .Namespace (and .Labels.x).
// Immutable and safe for concurrent use.
type HGTemplate struct {
	t      tmpl
	labels []string
}

// HGData is what a HostnameGenerator template renders from: the MeshExternalService's name
// (and display name, defaulting to the name), mesh, zone and labels.
type HGData struct {
	Name, DisplayName, Mesh, Zone, Namespace string
	Labels                                   map[string]string
}

// MissingLabelError says a label needed by a HostnameGenerator template is absent.
type MissingLabelError struct{ Label string }

func (e *MissingLabelError) Error() string { return fmt.Sprintf("label %q is missing", e.Label) }

const (
	refName int8 = iota + 2
	refDisplayName
	refMesh
	refZone
	refNamespace
	refLabel
)

var hgFields = map[string]int8{"Name": refName, "DisplayName": refDisplayName, "Mesh": refMesh, "Zone": refZone, "Namespace": refNamespace}

const hgField = "spec.template"

// CompileHostnameGenerator compiles a HostnameGenerator template. Errors are *TemplateError
// naming spec.template.
func CompileHostnameGenerator(src string) (*HGTemplate, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &TemplateError{Field: hgField, Template: src, Msg: "empty"}
	}
	funcs := template.FuncMap{
		"name":  func() string { return "" },
		"label": func(string) (string, error) { return "", nil },
	}
	t, err := parseTemplate(hgField, src, funcs, "label")
	if err != nil {
		return nil, err
	}
	ht := &HGTemplate{t: tmpl{field: hgField, src: src, t: t}}
	seen := map[string]bool{}
	var walkErr error
	walk(t.Tree.Root, func(n parse.Node) {
		switch n := n.(type) {
		case *parse.CommandNode:
			if l, ok := literalCall(n, "label"); ok && !seen[l] {
				seen[l] = true
				ht.labels = append(ht.labels, l)
			}
		case *parse.FieldNode:
			if _, ok := hgFields[n.Ident[0]]; !ok && n.Ident[0] != "Labels" && walkErr == nil {
				walkErr = &TemplateError{Field: hgField, Template: src, Msg: fmt.Sprintf(
					"no field %q (use .Name, .DisplayName, .Mesh, .Zone, .Namespace, name or label \"x\")", n.Ident[0])}
			}
		}
	})
	if walkErr != nil {
		return nil, walkErr
	}
	ht.t.segs, ht.t.fast = simpleSegments(t.Tree.Root, func(c *parse.CommandNode) (segment, bool) {
		if l, ok := literalCall(c, "label"); ok {
			return segment{ref: refLabel, text: l}, true
		}
		if len(c.Args) != 1 {
			return segment{}, false
		}
		switch a := c.Args[0].(type) {
		case *parse.IdentifierNode:
			if a.Ident == "name" {
				return segment{ref: refName}, true
			}
		case *parse.FieldNode:
			if r, ok := hgFields[a.Ident[0]]; ok && len(a.Ident) == 1 {
				return segment{ref: r}, true
			}
			if a.Ident[0] == "Labels" && len(a.Ident) == 2 {
				return segment{ref: refLabel, text: a.Ident[1]}, true
			}
		}
		return segment{}, false
	})
	return ht, nil
}

// Labels is the literal label keys the template reads through {{ label "x" }}, in order.
func (ht *HGTemplate) Labels() []string { return ht.labels }

// Render renders the hostname for d: lower-cased, without a final dot, a valid hostname.
// A missing label is a *MissingLabelError naming it.
func (ht *HGTemplate) Render(d HGData) (string, error) {
	if d.DisplayName == "" {
		d.DisplayName = d.Name
	}
	var buf [128]byte
	b := buf[:0]
	if ht.t.fast {
		for _, s := range ht.t.segs {
			switch s.ref {
			case 0:
				b = append(b, s.text...)
			case refName:
				b = append(b, d.Name...)
			case refDisplayName:
				b = append(b, d.DisplayName...)
			case refMesh:
				b = append(b, d.Mesh...)
			case refZone:
				b = append(b, d.Zone...)
			case refNamespace:
				b = append(b, d.Namespace...)
			case refLabel:
				v, ok := d.Labels[s.text]
				if !ok {
					return "", &MissingLabelError{Label: s.text}
				}
				b = append(b, v...)
			}
		}
	} else {
		funcs := template.FuncMap{
			"name": func() string { return d.Name },
			"label": func(k string) (string, error) {
				v, ok := d.Labels[k]
				if !ok {
					return "", &MissingLabelError{Label: k}
				}
				return v, nil
			},
		}
		out, err := execSlow(&ht.t, funcs, d)
		if err != nil {
			return "", err
		}
		b = append(b, out...)
	}
	b = bytes.TrimSuffix(b, []byte{'.'})
	lowerASCII(b)
	if err := validHostname(b); err != nil {
		return "", &RenderError{Field: hgField, Rendered: string(b), Msg: err.Error()}
	}
	return string(b), nil
}

// Valid checks a lower-case hostname without a final dot: labels of [a-z0-9_-]
// (underscore allowed: Kuma's Kubernetes service names use it), 1-63 characters, not
// starting or ending with '-', 253 characters in all.
func Valid(h string) error {
	return validHostname([]byte(h))
}

var (
	errHostEmpty   = errors.New("empty hostname")
	errHostLong    = errors.New("hostname longer than 253 characters")
	errLabelEmpty  = errors.New("empty label")
	errLabelLong   = errors.New("label longer than 63 characters")
	errLabelHyphen = errors.New("label starts or ends with '-'")
)

func validHostname(h []byte) error {
	if len(h) == 0 {
		return errHostEmpty
	}
	if len(h) > 253 {
		return errHostLong
	}
	start := 0
	for i := 0; i <= len(h); i++ {
		if i < len(h) && h[i] != '.' {
			c := h[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return badChar(h[i:])
			}
			continue
		}
		l := h[start:i]
		switch {
		case len(l) == 0:
			return errLabelEmpty
		case len(l) > 63:
			return errLabelLong
		case l[0] == '-' || l[len(l)-1] == '-':
			return errLabelHyphen
		}
		start = i + 1
	}
	return nil
}

// badChar names the character that starts b: the whole character when it is UTF-8 (a tag
// value's 'ü', not its first byte), the byte otherwise.
func badChar(b []byte) error {
	r, size := utf8.DecodeRune(b)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Errorf("byte '\\x%02x' (not UTF-8) not allowed in a hostname", b[0])
	}
	return fmt.Errorf("character %q not allowed in a hostname", r)
}

func lowerASCII(b []byte) {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// rewriteBare rewrites the unquoted forms of the VirtualHost draft into calls text/template can parse:
// `{{fn key}}` -> `{{fn "key"}}` and `{{kuma.io/zone}}` -> `{{fn "kuma.io/zone"}}`.
func rewriteBare(src, fn string) string {
	if !strings.Contains(src, "{{") {
		return src
	}
	var b strings.Builder
	rest := src
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i+2:], "}}")
		if j < 0 {
			break
		}
		inner := rest[i+2 : i+2+j]
		b.WriteString(rest[:i+2])
		b.WriteString(rewriteAction(inner, fn))
		b.WriteString("}}")
		rest = rest[i+2+j+2:]
	}
	b.WriteString(rest)
	return b.String()
}

func rewriteAction(inner, fn string) string {
	body := inner
	lead, trail := " ", " "
	if strings.HasPrefix(body, "- ") {
		lead, body = "- ", body[2:]
	}
	if strings.HasSuffix(body, " -") {
		trail, body = " -", body[:len(body)-2]
	}
	content := strings.TrimSpace(body)
	if args, ok := strings.CutPrefix(content, fn); ok && len(args) > 0 && (args[0] == ' ' || args[0] == '\t') {
		if arg := strings.TrimSpace(args); isBareword(arg) {
			return lead + fn + " " + quote(arg) + trail
		}
		return inner
	}
	if isBareword(content) && !IsIdentifier(content) {
		return lead + fn + " " + quote(content) + trail
	}
	return inner
}

func quote(s string) string { return `"` + s + `"` }

// isBareword: a tag key written without quotes, e.g. version, kuma.io/service.
func isBareword(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z' || s[0] == '_') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-') {
			return false
		}
	}
	return true
}

// IsIdentifier reports whether s is a plain name: ASCII letters, digits and _, not starting
// with a digit (a template variable; mesh writes such a key as a.key in a field path).
func IsIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// literalCall reports the literal argument of `fn "x"`.
func literalCall(c *parse.CommandNode, fn string) (string, bool) {
	if len(c.Args) != 2 {
		return "", false
	}
	id, ok := c.Args[0].(*parse.IdentifierNode)
	if !ok || id.Ident != fn {
		return "", false
	}
	s, ok := c.Args[1].(*parse.StringNode)
	if !ok {
		return "", false
	}
	return s.Text, true
}

// simpleSegments turns a template made of text and single-command actions that cmd
// understands into segments; ok is false when anything else appears.
func simpleSegments(root *parse.ListNode, cmd func(*parse.CommandNode) (segment, bool)) ([]segment, bool) {
	var segs []segment
	for _, n := range root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			if len(segs) > 0 && segs[len(segs)-1].ref == 0 {
				segs[len(segs)-1].text += string(n.Text)
			} else {
				segs = append(segs, segment{text: string(n.Text)})
			}
		case *parse.ActionNode:
			if len(n.Pipe.Decl) != 0 || len(n.Pipe.Cmds) != 1 {
				return nil, false
			}
			s, ok := cmd(n.Pipe.Cmds[0])
			if !ok {
				return nil, false
			}
			segs = append(segs, s)
		default:
			return nil, false
		}
	}
	return segs, true
}

// walk calls fn on every node of a parse tree.
func walk(n parse.Node, fn func(parse.Node)) {
	if n == nil {
		return
	}
	fn(n)
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, fn)
		}
	case *parse.ActionNode:
		walk(n.Pipe, fn)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, fn)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, fn)
		}
	case *parse.ChainNode:
		walk(n.Node, fn)
	case *parse.IfNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.TemplateNode:
		walk(n.Pipe, fn)
	}
}

func walkBranch(b *parse.BranchNode, fn func(parse.Node)) {
	walk(b.Pipe, fn)
	walk(b.List, fn)
	walk(b.ElseList, fn)
}
