package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kumadp/kuma-dp/hostname"
)

// Validate checks one resource (as built in code; Decode validates what it decodes). Paths
// are those of the universal form. It returns nil or an Errors with every problem.
func Validate(r Resource) error {
	m := r.GetMeta()
	v := &validator{source: m.Source, kind: r.Kind(), name: m.Name, path: func(p string) string { return p }}
	v.resource(r)
	if len(v.errs) > 0 {
		return v.errs
	}
	return nil
}

// validator collects the problems of one resource.
type validator struct {
	source     Source
	kind, name string
	path       func(string) string // universal path -> path in the document
	errs       Errors
}

func (v *validator) errorf(path, value, format string, args ...any) {
	if len(v.errs) > MaxFileErrors {
		return // Decode lists MaxFileErrors and says it stopped
	}
	v.errs = append(v.errs, &FieldError{Source: v.source.String(), Kind: v.kind, Name: v.name,
		Path: v.path(path), Value: redact(v.path(path), value), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) resource(r Resource) {
	v.meta(r.GetMeta())
	switch r := r.(type) {
	case *Dataplane:
		v.dataplane(r)
	case *VirtualOutbound:
		v.virtualOutbound(r)
	case *TrafficRoute:
		v.trafficRoute(r)
	case *MeshExternalService:
		v.meshExternalService(r)
	case *HostnameGenerator:
		v.hostnameGenerator(r)
	case *MeshService:
		v.meshService(r)
	case *MeshTCPRoute:
		v.meshTCPRoute(r)
	case *MeshHTTPRoute:
		v.meshHTTPRoute(r)
	case *Router:
		v.router(r)
	case *Route:
		v.route(r)
	case *RouteBinding:
		v.routeBinding(r)
	case *DNSZone:
		v.dnsZone(r)
	}
}

func (v *validator) meta(m *Meta) {
	if err := checkName(m.Name); err != nil {
		v.errorf("name", m.Name, "%v", err)
	}
	if m.Mesh != "" {
		if err := checkName(m.Mesh); err != nil {
			v.errorf("mesh", m.Mesh, "%v", err)
		}
	}
	for _, k := range sortedTagKeys(m.Labels()) {
		if k == "" {
			v.errorf("labels", "", "empty label key")
		}
	}
}

// checkName: names are DNS-label-ish: 1-253 characters of [A-Za-z0-9._-], starting and
// ending with a letter or digit.
func checkName(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if len(s) > 253 {
		return errors.New("longer than 253 characters")
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if c, bad := firstNotAllowed(s, func(c byte) bool { return alnum(c) || c == '-' || c == '.' || c == '_' }); bad {
		return fmt.Errorf("character %q not allowed (use letters, digits, '-', '.', '_')", c)
	}
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errors.New("must start and end with a letter or digit")
	}
	return nil
}

// firstNotAllowed is the first character of s that ok does not allow (every character
// beyond ASCII is refused), as the character written: not a byte of its UTF-8 encoding
// ('ä' was named 'Ã', its first byte quoted).
func firstNotAllowed(s string, ok func(byte) bool) (rune, bool) {
	for _, r := range s {
		if r >= utf8.RuneSelf || !ok(byte(r)) {
			return r, true
		}
	}
	return 0, false
}

// dataplane checks a Dataplane's networking: its addresses, its inbounds (or a gateway), its
// outbounds and its transparent proxying.
func (v *validator) dataplane(dp *Dataplane) {
	n := dp.Networking
	v.ip("networking.address", n.Address, true)
	v.ip("networking.advertisedAddress", n.AdvertisedAddress(), false)
	gateway := v.gateway(n.NetworkingExtra)
	if len(n.Inbound) > 0 && gateway {
		// As Kuma: a gateway's traffic comes in through the gateway, its service is
		// gateway.tags' (inbounds beside it would give the dataplane two identities).
		v.errorf("networking.inbound", "", "a gateway dataplane has no inbounds: give inbounds or gateway, not both")
	}
	if len(n.Inbound) == 0 && !gateway {
		v.errorf("networking.inbound", "", "at least one inbound is required (or a gateway)")
	}
	for i := range n.Inbound {
		v.inbound("networking.inbound["+strconv.Itoa(i)+"]", &n.Inbound[i])
	}
	seen := map[string]int{}
	for i, out := range n.Outbound() {
		v.outbound(i, out, seen)
	}
	if tp := n.TransparentProxying(); tp != nil {
		v.transparentProxying(tp)
	}
}

// inbound checks an inbound at path p.
func (v *validator) inbound(p string, in *Inbound) {
	v.port(p+".port", in.Port, true)
	v.port(p+".servicePort", in.ServicePort, false)
	v.ip(p+".address", in.Address(), false)
	v.ip(p+".serviceAddress", in.ServiceAddress(), false)
	v.tags(p+".tags", in.Tags, true, false)
	switch in.State() {
	case "", InboundReady, InboundNotReady, InboundIgnored:
	default:
		v.errorf(p+".state", in.State(), "must be %s, %s or %s", InboundReady, InboundNotReady, InboundIgnored)
	}
}

// outbound checks outbound i; seen is the outbounds' address:port so far (index by key), a
// duplicate refused.
func (v *validator) outbound(i int, out Outbound, seen map[string]int) {
	p := "networking.outbound[" + strconv.Itoa(i) + "]"
	v.port(p+".port", out.Port, true)
	v.ip(p+".address", out.Address, false)
	addr := out.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	key := addr + ":" + strconv.FormatUint(uint64(out.Port), 10)
	if j, dup := seen[key]; dup && out.Port != 0 {
		v.errorf(p+".port", fmt.Sprint(out.Port), "duplicate outbound %s, also networking.outbound[%d]", key, j)
	}
	seen[key] = i
	switch {
	case out.BackendRef != nil && len(out.Tags) > 0:
		v.errorf(p, "", "give tags or backendRef, not both")
	case out.BackendRef != nil:
		b := out.BackendRef
		if b.Kind != KindMeshExternalService && b.Kind != KindMeshService {
			v.errorf(p+".backendRef.kind", b.Kind, "must be %s or %s", KindMeshService, KindMeshExternalService)
		}
		if b.Name == "" {
			v.errorf(p+".backendRef.name", "", "required")
		}
		v.port(p+".backendRef.port", b.Port, false)
	case len(out.Tags) > 0:
		v.tags(p+".tags", out.Tags, true, false)
	default:
		v.errorf(p, "", "needs tags with %s, or a backendRef", ServiceTag)
	}
	if out.Hostname != "" {
		v.errorf(p+".hostname", out.Hostname, "set by the agent from VirtualOutbounds; leave it out")
	}
}

// transparentProxying checks networking.transparentProxying: its ports, its IP family and
// its reachableServices.
func (v *validator) transparentProxying(tp *TransparentProxying) {
	v.port("networking.transparentProxying.redirectPortInbound", tp.RedirectPortInbound, false)
	v.port("networking.transparentProxying.redirectPortOutbound", tp.RedirectPortOutbound, false)
	switch strings.ToLower(tp.IPFamilyMode) {
	case "", "dualstack", "ipv4", "ipv6":
	default:
		v.errorf("networking.transparentProxying.ipFamilyMode", tp.IPFamilyMode, "must be dualstack, ipv4 or ipv6")
	}
	for i, svc := range tp.ReachableServices {
		p := indexPath("networking.transparentProxying.reachableServices", i)
		switch {
		case svc == "":
			v.errorf(p, svc, "empty service name")
		case svc == Wildcard:
			v.errorf(p, svc, `a service name, not "*" (leave reachableServices out to reach every service)`)
		case strings.ContainsAny(svc, " \t\n"):
			v.errorf(p, svc, "service names cannot contain whitespace")
		}
	}
}

// gateway checks Kuma's networking.gateway, kept as written (the agent does not act on it),
// and reports whether the dataplane has one. A gateway dataplane has no inbounds in Kuma
// (its traffic comes in through the gateway); its gateway.tags name its service, so they
// need kuma.io/service, and its type is DELEGATED (the default) or BUILTIN.
func (v *validator) gateway(x *NetworkingExtra) bool {
	if x == nil || len(x.Gateway) == 0 || string(x.Gateway) == "null" {
		return false
	}
	var g struct {
		Type string         `json:"type"`
		Tags map[string]any `json:"tags"`
	}
	if err := json.Unmarshal(x.Gateway, &g); err != nil {
		var s any
		_ = json.Unmarshal(x.Gateway, &s)
		v.errorf("networking.gateway", scalarText(s), "expected a mapping with tags")
		return true
	}
	switch g.Type {
	case "", "DELEGATED", "BUILTIN":
	default:
		v.errorf("networking.gateway.type", g.Type, "must be DELEGATED or BUILTIN")
	}
	tags := make(map[string]string, len(g.Tags))
	for _, k := range slices.Sorted(maps.Keys(g.Tags)) { // problems in a stable order
		switch val := g.Tags[k]; val.(type) {
		case string, float64, bool:
			tags[k] = fmt.Sprint(val)
		default:
			v.errorf(keyPath("networking.gateway.tags", k), "", "expected text, got %s", typeName(val))
			tags[k] = "?"
		}
	}
	v.tags("networking.gateway.tags", TagsOf(tags), true, false)
	return true
}

func (v *validator) ip(path, s string, required bool) {
	if s == "" {
		if required {
			v.errorf(path, "", "required")
		}
		return
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		v.errorf(path, s, "not an IP address")
	case a.Zone() != "":
		// Envoy parses no zone: the update carrying it would be rejected whole.
		v.errorf(path, s, "an IP address without a zone (%%%s)", a.Zone())
	case a.IsUnspecified() && (path == "networking.address" || path == "networking.advertisedAddress"):
		v.errorf(path, s, "must not be 0.0.0.0 or :: (other dataplanes connect to it)")
	}
}

func (v *validator) port(path string, p uint32, required bool) {
	switch {
	case p == 0 && required:
		v.errorf(path, "", "required (1-65535)")
	case p > 65535:
		v.errorf(path, fmt.Sprint(p), "port must be 1-65535")
	}
}

// tags checks a tag map: non-empty keys and values; wildcard allows "*" values (selectors);
// needService requires a non-wildcard-free kuma.io/service.
func (v *validator) tags(path string, t Tags, needService, wildcard bool) {
	if len(t) == 0 {
		if needService {
			v.errorf(path, "", "required, with %s", ServiceTag)
		} else {
			v.errorf(path, "", "empty: an empty selector matches nothing")
		}
		return
	}
	if tagsNeedReport(t, wildcard) { // sorted keys only when there is something to report
		for _, tg := range t {
			k, val := tg.Key, tg.Value
			switch msg := tagProblem(k, val, wildcard); {
			case msg == "":
			case k == "":
				v.errorf(path, val, "%s", msg)
			default:
				v.errorf(keyPath(path, k), val, "%s", msg)
			}
		}
	}
	if needService && !t.Has(ServiceTag) {
		v.errorf(path, "", "must contain %s", ServiceTag)
	}
}

// tagProblem is what is wrong with tag k=val ("" when nothing); wildcard allows "*".
func tagProblem(k, val string, wildcard bool) string {
	switch {
	case k == "":
		return "empty tag key"
	case val == "":
		return "empty tag value"
	case val == Wildcard && !wildcard:
		return `"*" is only allowed in selectors`
	case strings.IndexFunc(val, unicode.IsSpace) >= 0:
		return "tag values cannot contain whitespace"
	case strings.IndexFunc(k, unicode.IsSpace) >= 0: // as Kuma refuses them: a key is a name
		return "tag keys cannot contain whitespace"
	case strings.ContainsAny(val, tupleSyntax):
		return "tag values cannot contain ',', '=', '{' or '}'"
	case strings.ContainsAny(k, tupleSyntax):
		return "tag keys cannot contain ',', '=', '{' or '}'"
	}
	return ""
}

// tupleSyntax is what a tuple's key (policy{k1=v1,k2=v2}) is spelled with: a tag holding
// one could make two tuples spell one key. Kuma's tag rules refuse them too.
const tupleSyntax = ",={}"

// tagsNeedReport reports whether some tag of t is refused by validator.tags.
func tagsNeedReport(t Tags, wildcard bool) bool {
	for _, tg := range t {
		if tagProblem(tg.Key, tg.Value, wildcard) != "" {
			return true
		}
	}
	return false
}

func (v *validator) virtualOutbound(vo *VirtualOutbound) {
	if len(vo.Selectors) == 0 {
		v.errorf("selectors", "", "at least one selector is required")
	}
	for i, s := range vo.Selectors {
		// The VirtualHost draft: a virtual host without kuma.io/service is impossible. A
		// VirtualOutbound selector, as in Kuma, needs at least one tag, any tag: {region: eu}
		// selects the inbounds of every service in that region.
		v.tags(fmt.Sprintf("selectors[%d].match", i), s.Match, v.kind == kindVirtualHost, true)
	}
	if len(vo.Conf.Parameters) > 0 && !slices.ContainsFunc(vo.Conf.Parameters, func(p Parameter) bool {
		return p.TagKey == ServiceTag || p.TagKey == "" && p.Name == ServiceTag
	}) {
		// Kuma: "parameters ... must always contain at least kuma.io/service" (names are
		// made per service; conf.tags, the other form, keeps its own rule).
		v.errorf("conf.parameters", "", "must contain a parameter with tagKey %s, as Kuma requires", ServiceTag)
	}
	vt, err := hostname.CompileVirtualOutbound(vo.Conf.Templates())
	if err != nil {
		portOnly := true
		for _, err := range unjoin(err) {
			var te *hostname.TemplateError
			if errors.As(err, &te) {
				v.errorf(te.Field, te.Template, "template: %s", te.Msg)
				portOnly = portOnly && te.Field == "conf.port"
			} else {
				v.errorf("conf", "", "%v", err)
				portOnly = false
			}
		}
		if portOnly {
			// The host compiled: whether it renders a hostname is told at once too.
			c := vo.Conf.Templates()
			c.Port = "80"
			if hvt, err := hostname.CompileVirtualOutbound(c); err == nil {
				v.standIns(hvt, vo)
			}
		}
		return
	}
	// A tag or parameter the templates do not use is accepted, as Kuma accepts it: it still
	// splits the tuples (kuma.io/service must be there even when the host does not name the
	// service), and tuples rendering the same host and port are settled as collisions.
	if v.kind == kindVirtualHost && len(vo.Selectors) == 1 {
		// The VirtualHost draft: the host may only use tags present in the tags section.
		for _, k := range vt.TagKeys() {
			if !vo.Selectors[0].Match.Has(k) {
				v.errorf("conf.host", vo.Conf.Host, "tag %q is not in tags", k)
			}
		}
	}
	v.standIns(vt, vo)
}

// standIns reports what the templates render with stand-in tag values, host and port.
func (v *validator) standIns(vt *hostname.VOTemplate, vo *VirtualOutbound) {
	for _, err := range unjoin(vt.CheckStandIns()) {
		var re *hostname.RenderError
		if errors.As(err, &re) {
			v.errorf(re.Field, re.Rendered, "renders an invalid value with stand-in tag values: %s", re.Msg)
		} else {
			v.errorf("conf.host", vo.Conf.Host, "does not render with stand-in tag values: %v", err)
		}
	}
}

// unjoin is the errors errors.Join joined into err (err itself otherwise; none for nil).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func (v *validator) trafficRoute(tr *TrafficRoute) {
	if len(tr.Sources) == 0 {
		v.errorf("sources", "", "at least one source selector is required")
	}
	for i, s := range tr.Sources {
		v.tags(fmt.Sprintf("sources[%d].match", i), s.Match, false, true)
	}
	if len(tr.Destinations) == 0 {
		v.errorf("destinations", "", "at least one destination selector is required")
	}
	for i, s := range tr.Destinations {
		p := fmt.Sprintf("destinations[%d].match", i)
		v.tags(p, s.Match, true, true)
		for _, tg := range s.Match {
			if tg.Key != ServiceTag {
				// The L4 TrafficRoute design: all TCP connections of a service share one destination address, so
				// nothing but the service can be told apart.
				v.errorf(keyPath(p, tg.Key), tg.Value, "only %s can be used in destinations", ServiceTag)
			}
		}
	}
	v.weightedDestinations("conf", tr.Conf)
	v.loadBalancer(tr.LoadBalancer)
	if tr.HTTP != nil {
		v.httpRules(tr.HTTP)
	}
}

func (v *validator) hostnameGenerator(hg *HostnameGenerator) {
	switch k := hg.Spec.TargetRef.Kind; k {
	case KindMeshExternalService, KindMeshService:
	case KindMeshMultiZoneService:
		// Kuma's own generators for its multi-zone services (it creates some in every
		// zone): kept, selecting nothing here.
	default:
		v.errorf("spec.targetRef.kind", k, "must be %s or %s (%s is accepted and selects nothing here)",
			KindMeshExternalService, KindMeshService, KindMeshMultiZoneService)
	}
	ht, err := hostname.CompileHostnameGenerator(hg.Spec.Template)
	if err != nil {
		var te *hostname.TemplateError
		if errors.As(err, &te) {
			v.errorf(te.Field, te.Template, "template: %s", te.Msg)
		} else {
			v.errorf("spec.template", hg.Spec.Template, "%v", err)
		}
		return
	}
	// Stand-in values: a template whose fixed parts can never make a hostname is refused.
	labels := map[string]string{}
	for _, l := range ht.Labels() {
		labels[l] = "a1"
	}
	_, err = ht.Render(hostname.HGData{Name: "a1", Mesh: "a1", Zone: "a1", Namespace: "a1", Labels: labels})
	var ml *hostname.MissingLabelError
	if err != nil && !errors.As(err, &ml) {
		var re *hostname.RenderError
		if errors.As(err, &re) {
			v.errorf(re.Field, re.Rendered, "renders an invalid value with stand-in values: %s", re.Msg)
		} else {
			v.errorf("spec.template", hg.Spec.Template, "does not render with stand-in values: %v", err)
		}
	}
}

func sortedTagKeys(t map[string]string) []string {
	ks := make([]string, 0, len(t))
	for k := range t {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
