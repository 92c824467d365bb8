package xds

import (
	"fmt"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"net/netip"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/kumadp/kuma-dp/mesh"
)

// MESClusterPrefix prefixes the cluster of a MeshExternalService (the MeshExternalService design).
const MESClusterPrefix = "meshexternalservice_"

// meshExternalService ensures the cluster of the named MeshExternalService exists and returns
// its name; false (with the problem reported once) when it cannot be expressed.
func (g *generator) meshExternalService(name string) (string, bool) {
	cname := MESClusterPrefix + name
	if _, ok := g.clusters[cname]; ok {
		return cname, true
	}
	m := g.mes[name]
	if m == nil {
		return "", false
	}
	if g.mesFailed == nil {
		g.mesFailed = map[string]bool{}
	}
	if g.mesFailed[name] {
		return "", false
	}
	c, err := mesCluster(cname, m, g.o.CABundle)
	if err != nil {
		g.mesFailed[name] = true
		g.problem(mesh.KindMeshExternalService, name, err.field, err.msg)
		return "", false
	}
	// Few and small: the signature is the built cluster itself.
	sig, merr := marshal.Marshal(c)
	if merr != nil {
		sig = nil
	}
	g.addCluster(cname, string(sig), func() *cluster.Cluster { return c })
	return cname, true
}

// MaxSocketPath is the longest unix socket path: sun_path is 108 bytes with its NUL.
const MaxSocketPath = 107

type mesEndpoint struct {
	addr   *core.Address
	domain string // set for DNS-resolved endpoints
	ip     string // set for IP endpoints
	unix   bool
}

func mesCluster(name string, m *mesh.MeshExternalService, caBundle string) (*cluster.Cluster, *routeError) {
	spec := m.Spec
	if spec.Extension != nil {
		return nil, &routeError{"spec.extension.type", fmt.Sprintf("extensions are not supported by kuma-dp (value %q)", spec.Extension.Type)}
	}
	if len(spec.Endpoints) == 0 {
		return nil, &routeError{"spec.endpoints", "at least one endpoint is required"}
	}
	var eps []mesEndpoint
	domains, unix := 0, 0
	for i, e := range spec.Endpoints {
		field := fmt.Sprintf("spec.endpoints[%d]", i)
		port := e.Port
		if port == 0 {
			port = spec.Match.Port
		}
		switch {
		case strings.HasPrefix(e.Address, "unix://"):
			path := strings.TrimPrefix(e.Address, "unix://")
			if path == "" {
				return nil, &routeError{field + ".address", fmt.Sprintf("empty unix socket path (value %q)", e.Address)}
			}
			if len(path) > MaxSocketPath { // Envoy refuses it (a sockaddr_un holds 108 bytes with the NUL)
				return nil, &routeError{field + ".address", fmt.Sprintf("the socket path is %d bytes, unix sockets allow %d (value %q)", len(path), MaxSocketPath, e.Address)}
			}
			unix++
			eps = append(eps, mesEndpoint{addr: pipeAddress(path), unix: true})
		case port == 0 || port > 65535:
			return nil, &routeError{field + ".port", fmt.Sprintf("needs a port between 1 and 65535 (value %q)", fmt.Sprint(port))}
		default:
			if ip, err := netip.ParseAddr(e.Address); err == nil {
				eps = append(eps, mesEndpoint{addr: socketAddress(ip.String(), port), ip: ip.String()})
				continue
			}
			if !isDomain(e.Address) {
				return nil, &routeError{field + ".address", fmt.Sprintf("not an IP, a domain name or unix://path (value %q)", e.Address)}
			}
			domains++
			eps = append(eps, mesEndpoint{addr: socketAddress(e.Address, port), domain: e.Address})
		}
	}
	if unix > 0 && unix != len(eps) {
		return nil, &routeError{"spec.endpoints", "unix socket endpoints cannot be mixed with network endpoints"}
	}
	addrs := make([]*core.Address, len(eps))
	for i, e := range eps {
		addrs[i] = e.addr
	}
	kind := cluster.Cluster_STATIC
	switch {
	case domains == 1 && len(eps) == 1:
		kind = cluster.Cluster_LOGICAL_DNS // one name: keep one connection pool, resolve lazily
	case domains > 0:
		kind = cluster.Cluster_STRICT_DNS // every address of every name is an endpoint
	}
	c := staticCluster(name, kind, addrs)
	prioritize(c.LoadAssignment, spec.Endpoints)
	if spec.TLS != nil && (spec.TLS.Enabled == nil || *spec.TLS.Enabled) {
		if unix > 0 {
			return nil, &routeError{"spec.tls", "TLS origination to unix socket endpoints is not supported"}
		}
		utc, err := upstreamTLS(spec.TLS, eps, caBundle)
		if err != nil {
			return nil, err
		}
		c.TransportSocket = &core.TransportSocket{Name: tlsTransportSocket, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(utc)}}
	}
	return c, nil
}

// prioritize splits the load assignment's endpoints (one per spec.endpoints element, in
// order) into Envoy priorities by Kuma's endpoint priority: the lowest first, numbered from 0
// as Envoy wants them contiguous. Without priorities it changes nothing.
func prioritize(la *endpoint.ClusterLoadAssignment, eps []mesh.MESEndpoint) {
	if len(la.Endpoints) != 1 || len(la.Endpoints[0].LbEndpoints) != len(eps) {
		return
	}
	var levels []uint32
	for _, e := range eps {
		if !slices.Contains(levels, e.Priority) {
			levels = append(levels, e.Priority)
		}
	}
	if len(levels) < 2 {
		return
	}
	slices.Sort(levels)
	all := la.Endpoints[0].LbEndpoints
	la.Endpoints = make([]*endpoint.LocalityLbEndpoints, len(levels))
	for i := range levels {
		la.Endpoints[i] = &endpoint.LocalityLbEndpoints{Priority: uint32(i)}
	}
	for i, e := range eps {
		at := slices.Index(levels, e.Priority)
		la.Endpoints[at].LbEndpoints = append(la.Endpoints[at].LbEndpoints, all[i])
	}
}

func isDomain(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

var tlsVersions = map[string]tlsv3.TlsParameters_TlsProtocol{
	"":        tlsv3.TlsParameters_TLS_AUTO,
	"TLSAuto": tlsv3.TlsParameters_TLS_AUTO,
	"TLS10":   tlsv3.TlsParameters_TLSv1_0,
	"TLS11":   tlsv3.TlsParameters_TLSv1_1,
	"TLS12":   tlsv3.TlsParameters_TLSv1_2,
	"TLS13":   tlsv3.TlsParameters_TLSv1_3,
}

// upstreamTLS is the TLS origination of the MeshExternalService design's spec.tls.
func upstreamTLS(t *mesh.MESTLS, eps []mesEndpoint, caBundle string) (*tlsv3.UpstreamTlsContext, *routeError) {
	common := &tlsv3.CommonTlsContext{}
	if v := t.Version; v != nil {
		params, err := tlsParams(v.Min, v.Max)
		if err != nil {
			return nil, err
		}
		common.TlsParams = params
	}
	ver := t.Verification
	if ver == nil {
		ver = &mesh.MESVerification{}
	}
	utc := &tlsv3.UpstreamTlsContext{CommonTlsContext: common, AllowRenegotiation: t.AllowRenegotiation}
	for _, e := range eps {
		if e.domain != "" {
			utc.Sni = strings.TrimSuffix(e.domain, ".")
			break
		}
	}
	if ver.ServerName != "" { // Kuma's tls.verification.serverName overrides the SNI
		utc.Sni = strings.TrimSuffix(ver.ServerName, ".")
	}
	// Client certificate (mutual TLS): both or neither.
	if (ver.ClientCert == nil) != (ver.ClientKey == nil) {
		return nil, &routeError{"spec.tls.verification.clientCert", "clientCert and clientKey go together"}
	}
	if ver.ClientCert != nil {
		chain, err := dataSource("spec.tls.verification.clientCert", ver.ClientCert)
		if err != nil {
			return nil, err
		}
		key, err := dataSource("spec.tls.verification.clientKey", ver.ClientKey)
		if err != nil {
			return nil, err
		}
		common.TlsCertificates = []*tlsv3.TlsCertificate{{CertificateChain: chain, PrivateKey: key}}
	}
	mode := ver.Mode
	if mode == "" {
		mode = "Secured"
	}
	switch mode {
	case "SkipAll", "SkipALL":
		return utc, nil // no validation context: any certificate is accepted
	case "Secured", "SkipSAN", "SkipCA":
	default:
		return nil, &routeError{"spec.tls.verification.mode", fmt.Sprintf("one of Secured, SkipSAN, SkipCA, SkipAll (value %q)", ver.Mode)}
	}
	vc, err := validationContext(ver, mode, eps, caBundle)
	if err != nil {
		return nil, err
	}
	common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	return utc, nil
}

// tlsParams are the TLS versions from minV to maxV (each TLSAuto or TLS10-TLS13).
func tlsParams(minV, maxV string) (*tlsv3.TlsParameters, *routeError) {
	lo, ok := tlsVersions[minV]
	if !ok {
		return nil, &routeError{"spec.tls.version.min", fmt.Sprintf("one of TLSAuto, TLS10, TLS11, TLS12, TLS13 (value %q)", minV)}
	}
	hi, ok := tlsVersions[maxV]
	if !ok {
		return nil, &routeError{"spec.tls.version.max", fmt.Sprintf("one of TLSAuto, TLS10, TLS11, TLS12, TLS13 (value %q)", maxV)}
	}
	if lo != tlsv3.TlsParameters_TLS_AUTO && hi != tlsv3.TlsParameters_TLS_AUTO && lo > hi {
		return nil, &routeError{"spec.tls.version", fmt.Sprintf("min is above max (value %q)", minV+" > "+maxV)}
	}
	return &tlsv3.TlsParameters{TlsMinimumProtocolVersion: lo, TlsMaximumProtocolVersion: hi}, nil
}

// validationContext checks the server's certificate in mode (Secured, SkipSAN or SkipCA):
// against the given CA (else the host's bundle, caBundle), and its names against the
// given ones or the endpoints'.
func validationContext(ver *mesh.MESVerification, mode string, eps []mesEndpoint, caBundle string) (*tlsv3.CertificateValidationContext, *routeError) {
	vc := &tlsv3.CertificateValidationContext{}
	if ver.CACert != nil {
		ca, err := dataSource("spec.tls.verification.caCert", ver.CACert)
		if err != nil {
			return nil, err
		}
		vc.TrustedCa = ca
	} else {
		if caBundle == "" {
			return nil, &routeError{"spec.tls.verification.caCert", "not given and no system CA bundle was found on this host"}
		}
		vc.TrustedCa = &core.DataSource{Specifier: &core.DataSource_Filename{Filename: caBundle}}
	}
	if mode == "SkipCA" {
		// The chain is not verified; the names still are checked below.
		vc.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
	}
	if mode != "SkipSAN" {
		sans, err := sanMatchers(ver.SubjectAltNames, eps)
		if err != nil {
			return nil, err
		}
		vc.MatchTypedSubjectAltNames = sans
	}
	return vc, nil
}

// sanMatchers: the given names, or (the MeshExternalService design) the endpoints' domains and IPs.
func sanMatchers(given []mesh.SANMatch, eps []mesEndpoint) ([]*tlsv3.SubjectAltNameMatcher, *routeError) {
	var out []*tlsv3.SubjectAltNameMatcher
	if len(given) == 0 {
		for _, e := range eps {
			switch {
			case e.domain != "":
				out = append(out, sanMatcher(tlsv3.SubjectAltNameMatcher_DNS, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: strings.TrimSuffix(e.domain, ".")}}))
			case e.ip != "":
				out = append(out, sanMatcher(tlsv3.SubjectAltNameMatcher_IP_ADDRESS, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: e.ip}}))
			}
		}
		return out, nil
	}
	for i, s := range given {
		field := fmt.Sprintf("spec.tls.verification.subjectAltNames[%d]", i)
		if s.Value == "" {
			return nil, &routeError{field + ".value", "must not be empty"}
		}
		san := tlsv3.SubjectAltNameMatcher_DNS
		if strings.Contains(s.Value, "://") {
			san = tlsv3.SubjectAltNameMatcher_URI
		} else if _, err := netip.ParseAddr(s.Value); err == nil {
			san = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
		}
		switch s.Type {
		case "", "Exact":
			out = append(out, sanMatcher(san, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s.Value}}))
		case "Prefix":
			out = append(out, sanMatcher(san, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: s.Value}}))
		default:
			return nil, &routeError{field + ".type", fmt.Sprintf("one of Exact, Prefix (value %q)", s.Type)}
		}
	}
	return out, nil
}

func sanMatcher(t tlsv3.SubjectAltNameMatcher_SanType, m *matcher.StringMatcher) *tlsv3.SubjectAltNameMatcher {
	return &tlsv3.SubjectAltNameMatcher{SanType: t, Matcher: m}
}

// dataSource turns the MeshExternalService design's {inline|inlineString|secret} into an Envoy data source.
// Secrets live in the control plane's store, which a file-based kuma-dp does not have.
func dataSource(field string, d *mesh.DataSource) (*core.DataSource, *routeError) {
	set := 0
	for _, b := range []bool{len(d.Inline) > 0, d.InlineString != "", d.Secret != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, &routeError{field, "exactly one of inline, inlineString, secret is required"}
	}
	switch {
	case len(d.Inline) > 0:
		return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: d.Inline}}, nil
	case d.InlineString != "":
		return &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: d.InlineString}}, nil
	default:
		return nil, &routeError{field + ".secret", fmt.Sprintf("secrets are not supported by kuma-dp without a control plane; use inline or inlineString (value %q)", d.Secret)}
	}
}
