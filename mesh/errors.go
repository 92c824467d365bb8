package mesh

import (
	"fmt"
	"strings"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/internal/errtext"
)

// FieldError is one problem with user input: where it is and what is wrong.
type FieldError struct {
	// Source is "file#doc" (document numbers start at 1); may be empty.
	Source string
	// Kind and Name identify the resource when known.
	Kind, Name string
	// Path is the field path inside the document, e.g. "conf.host" or "networking.inbound[0].tags".
	Path string
	// Value is the offending value, printed with %q; empty when there is none.
	Value string
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Kind != "" {
		fmt.Fprintf(&b, "%s %q: ", strings.ToLower(e.Kind), e.Name)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(errtext.Clip(e.Msg, 2*errtext.MaxShown))
	if e.Value != "" {
		fmt.Fprintf(&b, " (value %q)", errtext.Clip(e.Value, errtext.MaxShown))
	}
	return b.String()
}

// secretFields are the field names whose values may hold key material (a TLS client key,
// in whichever data-source form, and any field named like a key, password or token). An
// error about them, or about anything inside them, never shows the value, valid or not.
var secretFields = map[string]bool{"clientKey": true, "privateKey": true, "key": true,
	"password": true, "token": true}

// isSecretPath reports whether the field at path (e.g. "spec.tls.verification.clientKey.inline")
// is, or is inside, a secret field.
func isSecretPath(path string) bool {
	for seg := range strings.SplitSeq(path, ".") {
		if i := strings.IndexByte(seg, '['); i >= 0 {
			seg = seg[:i]
		}
		if secretFields[seg] {
			return true
		}
	}
	return false
}

// redact is value as an error may show it for the field at path: secret fields show only
// their length.
func redact(path, value string) string {
	if value == "" || !isSecretPath(path) {
		return value
	}
	return fmt.Sprintf("<redacted: %d bytes>", len(value))
}

// Errors is every problem found in the input; it is returned whole, never only the first.
type Errors []*FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// isIdentifier reports whether a mapping key is a plain word, written `a.key` in a field
// path rather than `a["kuma.io/service"]`.
func isIdentifier(s string) bool { return hostname.IsIdentifier(s) }
