package mesh

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/kumadp/kuma-dp/hostname"
)

// MeshExternalService validation (the MeshExternalService design).

var (
	mesProtocols     = []string{"tcp", "grpc", "http", "http2"}
	tlsVersions      = []string{"TLSAuto", "TLS10", "TLS11", "TLS12", "TLS13"}
	verifyModes      = []string{"Secured", "SkipSAN", "SkipCA", "SkipAll"}
	sanMatchTypes    = []string{"Exact", "Prefix"}
	unixSocketScheme = "unix://"
)

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func (v *validator) meshExternalService(mes *MeshExternalService) {
	s := mes.Spec
	if s.Match.Type != "" && s.Match.Type != "HostnameGenerator" { // "": HostnameGenerator, as in Kuma
		v.errorf("spec.match.type", s.Match.Type, "must be HostnameGenerator")
	}
	v.port("spec.match.port", s.Match.Port, true)
	if s.Match.Protocol != "" && !oneOf(s.Match.Protocol, mesProtocols) {
		v.errorf("spec.match.protocol", s.Match.Protocol, "must be one of %s", strings.Join(mesProtocols, ", "))
	}
	if s.Extension != nil && s.Extension.Type == "" {
		v.errorf("spec.extension.type", "", "required")
	}
	// With an extension, endpoints and tls are the extension's to check (the MeshExternalService design).
	if s.Extension == nil && len(s.Endpoints) == 0 {
		v.errorf("spec.endpoints", "", "at least one endpoint is required (unless spec.extension is given)")
	}
	for i, e := range s.Endpoints {
		v.endpoint(fmt.Sprintf("spec.endpoints[%d]", i), e)
	}
	if s.TLS != nil {
		v.tls(s.TLS)
	}
}

// endpoint: an IP, a domain or unix://path; a port unless it is a unix socket.
func (v *validator) endpoint(p string, e MESEndpoint) {
	switch {
	case e.Address == "":
		v.errorf(p+".address", "", "required (an IP, a domain or unix://path)")
	case strings.HasPrefix(e.Address, unixSocketScheme):
		if path := strings.TrimPrefix(e.Address, unixSocketScheme); !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
			v.errorf(p+".address", e.Address, "unix socket path must be absolute (unix:///path) or abstract (unix://@name)")
		}
		if e.Port != 0 {
			v.errorf(p+".port", fmt.Sprint(e.Port), "not allowed with a unix socket")
		}
		return
	default:
		if a, err := netip.ParseAddr(e.Address); err == nil && a.Zone() != "" {
			v.errorf(p+".address", e.Address, "an IP address without a zone (%%%s)", a.Zone())
		} else if err != nil {
			if herr := hostname.Valid(strings.ToLower(strings.TrimSuffix(e.Address, "."))); herr != nil {
				v.errorf(p+".address", e.Address, "not an IP, a domain (%v) or unix://path", herr)
			}
		}
	}
	v.port(p+".port", e.Port, true)
}

func (v *validator) tls(t *MESTLS) {
	if ver := t.Version; ver != nil {
		for _, f := range []struct{ path, val string }{{"spec.tls.version.min", ver.Min}, {"spec.tls.version.max", ver.Max}} {
			if f.val != "" && !oneOf(f.val, tlsVersions) {
				v.errorf(f.path, f.val, "must be one of %s", strings.Join(tlsVersions, ", "))
			}
		}
		if rank(ver.Min) > 0 && rank(ver.Max) > 0 && rank(ver.Min) > rank(ver.Max) {
			v.errorf("spec.tls.version", ver.Min+" > "+ver.Max, "min is above max")
		}
	}
	ver := t.Verification
	if ver == nil {
		return
	}
	if ver.ServerName != "" {
		if err := hostname.Valid(strings.ToLower(strings.TrimSuffix(ver.ServerName, "."))); err != nil {
			v.errorf("spec.tls.verification.serverName", ver.ServerName, "not a DNS name: %v", err)
		}
	}
	if ver.Mode != "" && !oneOf(ver.Mode, verifyModes) {
		v.errorf("spec.tls.verification.mode", ver.Mode, "must be one of %s", strings.Join(verifyModes, ", "))
	}
	for i, san := range ver.SubjectAltNames {
		p := fmt.Sprintf("spec.tls.verification.subjectAltNames[%d]", i)
		if san.Type != "" && !oneOf(san.Type, sanMatchTypes) {
			v.errorf(p+".type", san.Type, "must be Exact or Prefix")
		}
		if san.Value == "" {
			v.errorf(p+".value", "", "required")
		}
	}
	v.dataSource("spec.tls.verification.caCert", ver.CACert)
	v.dataSource("spec.tls.verification.clientCert", ver.ClientCert)
	v.dataSource("spec.tls.verification.clientKey", ver.ClientKey)
	// Reported at the missing one (not at their parent), so that a problem in the one given
	// never hides it: every error at once.
	switch {
	case ver.ClientCert != nil && ver.ClientKey == nil:
		v.errorf("spec.tls.verification.clientKey", "", "required with clientCert: clientCert and clientKey go together")
	case ver.ClientCert == nil && ver.ClientKey != nil:
		v.errorf("spec.tls.verification.clientCert", "", "required with clientKey: clientCert and clientKey go together")
	}
}

// rank orders TLS versions; 0 for TLSAuto or unknown.
func rank(ver string) int {
	switch ver {
	case "TLS10":
		return 1
	case "TLS11":
		return 2
	case "TLS12":
		return 3
	case "TLS13":
		return 4
	}
	return 0
}

// dataSource: exactly one of inline, inlineString, secret.
func (v *validator) dataSource(p string, ds *DataSource) {
	if ds == nil {
		return
	}
	n := 0
	if len(ds.Inline) > 0 {
		n++
	}
	if ds.InlineString != "" {
		n++
	}
	if ds.Secret != "" {
		n++
	}
	if n != 1 {
		v.errorf(p, "", "exactly one of inline, inlineString or secret is required, found %d", n)
	}
}
