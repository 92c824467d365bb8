package mesh

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Kuma's TrafficRoute conf.http: a list of rules, each matching requests (method, path,
// headers), optionally modifying them (path, host, request and response headers), and
// sending them to a split or a destination. Requests are matched against the rules in
// order, the first match wins; a request matching none goes to the route's conf
// (split/destination). The rules apply to outbounds of an HTTP service only (its inbounds
// tagged kuma.io/protocol http, http2 or grpc); for other services the route's conf alone
// is used, as in Kuma.
//
// The design's form keeps them beside conf, as `http:` (the resource's JSON and the
// control-plane link's canonical document); kumaRouteConf moves Kuma's conf.http there and
// errors name conf.http again. A route without HTTP rules holds a nil slice.

// HTTPRule is one element of conf.http.
type HTTPRule struct {
	Match  HTTPMatch   `json:"match"`
	Modify *HTTPModify `json:"modify,omitempty"`
	// Split or Destination (exactly one), as in conf.
	Split       []WeightedDestination `json:"split,omitempty"`
	Destination Tags                  `json:"destination,omitempty"`
}

// HTTPMatch is a rule's match: every matcher given must match.
type HTTPMatch struct {
	Method  *StringMatcher           `json:"method,omitempty"`
	Path    *StringMatcher           `json:"path,omitempty"`
	Headers map[string]StringMatcher `json:"headers,omitempty"`
}

// StringMatcher is exactly one of Prefix, Exact (which may be empty: an empty header
// value) and Regex (RE2).
type StringMatcher struct {
	Prefix *string `json:"prefix,omitempty"`
	Exact  *string `json:"exact,omitempty"`
	Regex  *string `json:"regex,omitempty"`
}

// Kind is the matcher's type ("prefix", "exact" or "regex"; "" when none is given) and its
// value.
func (m StringMatcher) Kind() (kind, value string) {
	switch {
	case m.Prefix != nil:
		return "prefix", *m.Prefix
	case m.Exact != nil:
		return "exact", *m.Exact
	case m.Regex != nil:
		return "regex", *m.Regex
	}
	return "", ""
}

// HTTPModify is a rule's modify.
type HTTPModify struct {
	Path            *HTTPPathRewrite  `json:"path,omitempty"`
	Host            *HTTPHostRewrite  `json:"host,omitempty"`
	RequestHeaders  *HTTPHeaderChange `json:"requestHeaders,omitempty"`
	ResponseHeaders *HTTPHeaderChange `json:"responseHeaders,omitempty"`
}

// HTTPPathRewrite is modify.path: RewritePrefix (replacing the matched path prefix) or Regex.
type HTTPPathRewrite struct {
	RewritePrefix string        `json:"rewritePrefix,omitempty"`
	Regex         *RegexReplace `json:"regex,omitempty"`
}

// HTTPHostRewrite is modify.host: Value, or FromPath (a regex on the path whose
// substitution is the host).
type HTTPHostRewrite struct {
	Value    string        `json:"value,omitempty"`
	FromPath *RegexReplace `json:"fromPath,omitempty"`
}

// RegexReplace is an RE2 pattern and its substitution (\1 is the first group).
type RegexReplace struct {
	Pattern      string `json:"pattern"`
	Substitution string `json:"substitution"`
}

// HTTPHeaderChange is modify.requestHeaders or modify.responseHeaders.
type HTTPHeaderChange struct {
	Add    []HTTPHeaderAdd    `json:"add,omitempty"`
	Remove []HTTPHeaderRemove `json:"remove,omitempty"`
}

// HTTPHeaderAdd is one header to add; Append keeps the values already there, else the
// header's value is replaced.
type HTTPHeaderAdd struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Append bool   `json:"append,omitempty"`
}

// HTTPHeaderRemove is one header to remove.
type HTTPHeaderRemove struct {
	Name string `json:"name"`
}

// httpProtocols are the kuma.io/protocol values of an HTTP service.
var httpProtocols = []string{"http", "http2", "grpc"}

// IsHTTPProtocol reports whether a kuma.io/protocol value is one of an HTTP service.
func IsHTTPProtocol(p string) bool { return slices.Contains(httpProtocols, p) }

// httpRules checks conf.http (paths are the design's: http[i]...; the Kuma form's
// conf.http[i]... is given by the decoder).
func (v *validator) httpRules(rules []HTTPRule) {
	for i, r := range rules {
		p := indexPath("http", i)
		v.httpMatch(p+".match", r.Match)
		if r.Modify != nil {
			v.httpModify(p+".modify", r.Modify, r.Match)
		}
		switch {
		case r.Split != nil && r.Destination != nil:
			v.errorf(p+".destination", "", "give split or destination, not both")
		case r.Split != nil:
			v.weightedDestinations(p+".split", r.Split)
		case r.Destination != nil:
			v.destinationTags(p+".destination", r.Destination)
		default:
			v.errorf(p, "", "needs split (weighted destinations) or destination")
		}
	}
}

func (v *validator) httpMatch(p string, m HTTPMatch) {
	if m.Method == nil && m.Path == nil && m.Headers == nil {
		v.errorf(p, "", "needs at least one of method, path and headers")
		return
	}
	if m.Method != nil {
		if kind, val := v.stringMatcher(p+".method", *m.Method); kind != "" && kind != "regex" {
			if strings.TrimSpace(val) == "" || strings.ContainsAny(val, " \t\r\n") {
				v.errorf(p+".method."+kind, val, "a method is a word (GET, POST, ...)")
			}
		}
	}
	if m.Path != nil {
		if kind, val := v.stringMatcher(p+".path", *m.Path); kind == "prefix" || kind == "exact" {
			if !strings.HasPrefix(val, "/") {
				v.errorf(p+".path."+kind, val, `must start with "/"`)
			}
		}
	}
	if m.Headers != nil && len(m.Headers) == 0 {
		v.errorf(p+".headers", "", "give at least one header, or leave headers out")
	}
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		hp := keyPath(p+".headers", name)
		if msg := headerNameProblem(name, true); msg != "" {
			v.errorf(hp, name, "%s", msg)
		}
		v.stringMatcher(hp, m.Headers[name])
	}
}

// stringMatcher checks that exactly one of prefix, exact and regex is given (prefix and
// regex not empty, regex RE2), returning which and its value ("" when it is not usable).
func (v *validator) stringMatcher(p string, m StringMatcher) (kind, value string) {
	n := 0
	for _, s := range []*string{m.Prefix, m.Exact, m.Regex} {
		if s != nil {
			n++
		}
	}
	if n != 1 {
		v.errorf(p, "", "give exactly one of prefix, exact and regex")
		return "", ""
	}
	kind, value = m.Kind()
	switch kind {
	case "prefix":
		if value == "" {
			v.errorf(p+".prefix", value, "must not be empty (leave the matcher out to match everything)")
			return "", ""
		}
	case "regex":
		if v.regex(p+".regex", value) == nil {
			return "", ""
		}
	}
	if strings.ContainsAny(value, "\x00\r\n") {
		v.errorf(p+"."+kind, value, "must not hold NUL, CR or LF")
		return "", ""
	}
	return kind, value
}

// regex checks an RE2 regular expression (Go's regexp reads RE2's syntax) that Envoy
// compiles (re2size.go), returning it compiled (nil when refused).
func (v *validator) regex(p, re string) *regexp.Regexp {
	if re == "" {
		v.errorf(p, re, "must not be empty")
		return nil
	}
	compiled, err := regexp.Compile(re)
	if err != nil {
		v.errorf(p, re, "not an RE2 regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		return nil
	}
	if n, err := re2ProgramSize(re); err == nil && n > maxRE2ProgramSize {
		v.errorf(p, re, "over kuma-dp's limit of %d RE2 instructions: about %d; simplify it (fewer or shorter bounded repetitions, ASCII classes)", maxRE2ProgramSize, n)
		return nil
	}
	return compiled
}

func (v *validator) httpModify(p string, m *HTTPModify, match HTTPMatch) {
	if m.Path != nil {
		pp := p + ".path"
		switch r := m.Path; {
		case r.RewritePrefix != "" && r.Regex != nil:
			v.errorf(pp, "", "give rewritePrefix or regex, not both")
		case r.RewritePrefix != "":
			if match.Path == nil || match.Path.Prefix == nil {
				v.errorf(pp+".rewritePrefix", r.RewritePrefix, "needs a path prefix match (match.path.prefix): it replaces the prefix matched")
			}
			if !strings.HasPrefix(r.RewritePrefix, "/") || strings.ContainsAny(r.RewritePrefix, "\x00\r\n") {
				v.errorf(pp+".rewritePrefix", r.RewritePrefix, `must start with "/" and hold no NUL, CR or LF`)
			}
		case r.Regex != nil:
			v.regexReplace(pp+".regex", *r.Regex)
		default:
			v.errorf(pp, "", "give rewritePrefix or regex")
		}
	}
	if m.Host != nil {
		hp := p + ".host"
		switch h := m.Host; {
		case h.Value != "" && h.FromPath != nil:
			v.errorf(hp, "", "give value or fromPath, not both")
		case h.Value != "":
			if strings.ContainsAny(h.Value, "\x00\r\n \t/") {
				v.errorf(hp+".value", h.Value, "not a host (no whitespace, '/', NUL, CR or LF)")
			}
		case h.FromPath != nil:
			v.regexReplace(hp+".fromPath", *h.FromPath)
		default:
			v.errorf(hp, "", "give value or fromPath")
		}
	}
	v.headerChange(p+".requestHeaders", m.RequestHeaders)
	v.headerChange(p+".responseHeaders", m.ResponseHeaders)
}

func (v *validator) regexReplace(p string, r RegexReplace) {
	pattern := v.regex(p+".pattern", r.Pattern)
	switch {
	case r.Substitution == "":
		v.errorf(p+".substitution", "", "required")
	case strings.ContainsAny(r.Substitution, "\x00\r\n"):
		v.errorf(p+".substitution", r.Substitution, "must not hold NUL, CR or LF")
	case pattern != nil:
		if msg := substitutionProblem(r.Substitution, pattern.NumSubexp()); msg != "" {
			v.errorf(p+".substitution", r.Substitution, "%s", msg)
		}
	}
}

// substitutionProblem is what RE2 (Envoy's rewrites) refuses in a substitution for a pattern
// of groups groups ("" when nothing): \0 to \9 name the match and its groups, \\ is a
// backslash, and nothing else may follow a backslash. RE2 refuses the substitution on every
// request: naming a missing group leaves the path or host as it was, another escape cuts the
// rewrite short there.
func substitutionProblem(sub string, groups int) string {
	for i := 0; i < len(sub); i++ {
		if sub[i] != '\\' {
			continue
		}
		i++
		switch {
		case i < len(sub) && sub[i] == '\\':
		case i < len(sub) && sub[i] >= '0' && sub[i] <= '9':
			if n := int(sub[i] - '0'); n > groups {
				return fmt.Sprintf("\\%d names a group the pattern has not (it has %d)", n, groups)
			}
		default:
			return `"\" is followed by a digit (a group) or "\"`
		}
	}
	return ""
}

// Envoy's limits on a route's headers to add (its validation rules refuse more): bytes of
// a name or a value, and headers per route and direction.
const (
	maxHeaderBytes  = 16384
	maxHeadersToAdd = 1000
)

func (v *validator) headerChange(p string, c *HTTPHeaderChange) {
	if c == nil {
		return
	}
	if len(c.Add) > maxHeadersToAdd {
		v.errorf(p+".add", "", "at most %d headers (Envoy's limit), not %d", maxHeadersToAdd, len(c.Add))
	}
	for i, a := range c.Add {
		ap := indexPath(p+".add", i)
		if msg := headerNameProblem(a.Name, false); msg != "" {
			v.errorf(ap+".name", a.Name, "%s", msg)
		} else if len(a.Name) > maxHeaderBytes {
			v.errorf(ap+".name", "", "at most %d bytes (Envoy's limit), not %d", maxHeaderBytes, len(a.Name))
		}
		switch {
		case a.Value == "":
			v.errorf(ap+".value", "", "required")
		case len(a.Value) > maxHeaderBytes:
			v.errorf(ap+".value", "", "at most %d bytes (Envoy's limit), not %d", maxHeaderBytes, len(a.Value))
		case strings.ContainsAny(a.Value, "\x00\r\n"):
			v.errorf(ap+".value", a.Value, "must not hold NUL, CR or LF")
		}
	}
	for i, r := range c.Remove {
		if msg := headerNameProblem(r.Name, false); msg != "" {
			v.errorf(indexPath(p+".remove", i)+".name", r.Name, "%s", msg)
		}
	}
}

// headerNameProblem is what is wrong with an HTTP header name ("" when nothing): a token
// of RFC 9110; match allows HTTP/2's pseudo-headers (":authority"), which, with host, cannot
// be modified.
func headerNameProblem(name string, match bool) string {
	if name == "" {
		return "a header name is required"
	}
	token := name
	if match {
		token = strings.TrimPrefix(name, ":")
	} else if name[0] == ':' || strings.EqualFold(name, "host") {
		return "host and HTTP/2 pseudo-headers (\":...\") cannot be modified"
	}
	if token == "" {
		return "not a header name"
	}
	if c, bad := firstNotAllowed(token, func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}); bad {
		return fmt.Sprintf("not a header name: character %q not allowed", c)
	}
	return ""
}

// weightedDestinations checks a split (conf, or an HTTP rule's): destinations with
// kuma.io/service, "*" only as the service, weights adding up to more than 0.
func (v *validator) weightedDestinations(p string, split []WeightedDestination) {
	if len(split) == 0 {
		v.errorf(p, "", "at least one weighted destination is required")
		return
	}
	var total uint64
	for i, c := range split {
		total += uint64(c.Weight)
		v.destinationTags(indexPath(p, i)+".destination", c.Destination)
	}
	if total == 0 {
		v.errorf(p, "", "weights add up to 0")
	}
}

// destinationTags checks one destination: "*" as the service (Kuma's route-all) is the
// service the connection was for; every other tag names one value.
func (v *validator) destinationTags(p string, t Tags) {
	v.tags(p, t, true, true)
	for _, tg := range t {
		if tg.Value == Wildcard && tg.Key != ServiceTag {
			v.errorf(keyPath(p, tg.Key), tg.Value, `"*" is only allowed as %s (the service the connection was for) and in selectors`, ServiceTag)
		}
	}
}
