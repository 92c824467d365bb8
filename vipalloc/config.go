package vipalloc

import (
	"fmt"
	"log/slog"
	"net/netip"
)

// Config is the allocator's configuration. Start from DefaultConfig: the zero value has
// DefaultServiceVIPs off; empty CIDR strings and a zero DefaultPort take the defaults.
type Config struct {
	// ServiceCIDR is the IPv4 pool of `<service>.mesh` and VirtualOutbound VIPs. The part of
	// it that ExternalCIDR covers is never handed out from it.
	ServiceCIDR string
	// ExternalCIDR is the IPv4 pool of MeshExternalService VIPs (the MeshExternalService design).
	ExternalCIDR string
	// MeshServiceCIDR is the IPv4 pool of MeshService VIPs (Kuma's range). It may lie inside
	// ServiceCIDR (the default does): the two never hand out one address twice.
	MeshServiceCIDR string
	// IPv6Prefix is the ULA prefix (at most /96) of the IPv6 twins: the twin of an IPv4 VIP
	// is the prefix with the IPv4 address in its low 32 bits.
	IPv6Prefix string
	// DefaultServiceVIPs gives every kuma.io/service of the mesh `<service>.mesh` on DefaultPort.
	DefaultServiceVIPs bool
	DefaultPort        uint32
	// StateFile keeps assignments across restarts (small JSON, written atomically). Empty:
	// nothing is persisted.
	StateFile string
	// Logger receives warnings (unreadable state file, failed state write). Nil: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
// ulaPrefix holds the unique local addresses (RFC 4193), where the IPv6 twins live.
var ulaPrefix = netip.MustParsePrefix("fc00::/7")

const (
	DefaultServiceCIDR  = "240.0.0.0/4"
	DefaultExternalCIDR = "242.0.0.0/8"
	// DefaultMeshServiceCIDR is Kuma's range of MeshService VIPs.
	DefaultMeshServiceCIDR = "241.0.0.0/8"
	DefaultIPv6Prefix      = "fd00:fd00::/64"
	DefaultServicePort     = 80
)

// DefaultConfig is the configuration of the VirtualOutbound and MeshExternalService designs: services and VirtualOutbounds from
// 240.0.0.0/4 (minus 242.0.0.0/8), MeshExternalServices from 242.0.0.0/8, twins in
// fd00:fd00::/64, default `<service>.mesh` names on port 80, no state file.
func DefaultConfig() Config {
	return Config{
		ServiceCIDR:        DefaultServiceCIDR,
		ExternalCIDR:       DefaultExternalCIDR,
		MeshServiceCIDR:    DefaultMeshServiceCIDR,
		IPv6Prefix:         DefaultIPv6Prefix,
		DefaultServiceVIPs: true,
		DefaultPort:        DefaultServicePort,
	}
}

// ConfigError is a bad Config field: Field is the Go field name, Value what it held.
type ConfigError struct {
	Field string
	Value string
	Msg   string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("vipalloc: %s %q: %s", e.Field, e.Value, e.Msg)
}

// settings is a validated Config.
type settings struct {
	service, external, meshService *pool
	v6                             netip.Prefix
	defaultVIPs                    bool
	defaultPort                    uint32
	stateFile                      string
	log                            *slog.Logger
}

func (c Config) validate() (*settings, error) {
	s := &settings{defaultVIPs: c.DefaultServiceVIPs, defaultPort: c.DefaultPort,
		stateFile: c.StateFile, log: c.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.defaultPort == 0 {
		s.defaultPort = DefaultServicePort
	}
	if s.defaultPort > 65535 {
		return nil, &ConfigError{Field: "DefaultPort", Value: fmt.Sprint(c.DefaultPort), Msg: "must be 1-65535"}
	}
	svc, err := parseV4("ServiceCIDR", c.ServiceCIDR, DefaultServiceCIDR)
	if err != nil {
		return nil, err
	}
	ext, err := parseV4("ExternalCIDR", c.ExternalCIDR, DefaultExternalCIDR)
	if err != nil {
		return nil, err
	}
	msp, err := parseV4("MeshServiceCIDR", c.MeshServiceCIDR, DefaultMeshServiceCIDR)
	if err != nil {
		return nil, err
	}
	if msp.Overlaps(ext) {
		return nil, &ConfigError{Field: "MeshServiceCIDR", Value: msp.String(),
			Msg: fmt.Sprintf("overlaps ExternalCIDR %s", ext)}
	}
	v6s := c.IPv6Prefix
	if v6s == "" {
		v6s = DefaultIPv6Prefix
	}
	v6, err := netip.ParsePrefix(v6s)
	switch {
	case err != nil:
		return nil, &ConfigError{Field: "IPv6Prefix", Value: v6s, Msg: "not a CIDR prefix"}
	case !v6.Addr().Is6() || v6.Addr().Is4In6():
		return nil, &ConfigError{Field: "IPv6Prefix", Value: v6s, Msg: "not an IPv6 prefix"}
	case v6.Bits() > 96:
		return nil, &ConfigError{Field: "IPv6Prefix", Value: v6s,
			Msg: fmt.Sprintf("prefix /%d is longer than /96: the low 32 bits must hold the IPv4 VIP", v6.Bits())}
	case v6.Bits() < 7 || !ulaPrefix.Contains(v6.Addr()):
		// Twins elsewhere would be addresses with a meaning of their own (::/0 makes them
		// IPv4-compatible ::a.b.c.d; 2000::/3 routable ones on the internet).
		return nil, &ConfigError{Field: "IPv6Prefix", Value: v6s,
			Msg: "must be a unique local prefix, inside fc00::/7 (e.g. " + DefaultIPv6Prefix + ")"}
	}
	s.v6 = v6.Masked()
	if ext.Overlaps(svc) && ext.Bits() <= svc.Bits() {
		return nil, &ConfigError{Field: "ServiceCIDR", Value: svc.String(),
			Msg: fmt.Sprintf("lies inside ExternalCIDR %s: no address would be left for services", ext)}
	}
	if s.service, err = newPool("ServiceCIDR", svc, ext); err != nil {
		return nil, err
	}
	if s.external, err = newPool("ExternalCIDR", ext, netip.Prefix{}); err != nil {
		return nil, err
	}
	if s.meshService, err = newPool("MeshServiceCIDR", msp, netip.Prefix{}); err != nil {
		return nil, err
	}
	// Inside the service pool (the default), MeshService VIPs and the service names' are
	// taken from one set: the service names keep the VIPs they hash to, a MeshService
	// never gets one of theirs, and neither ever moves the other's.
	s.meshService.share(s.service)
	return s, nil
}

func parseV4(field, v, def string) (netip.Prefix, error) {
	if v == "" {
		v = def
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, &ConfigError{Field: field, Value: v, Msg: "not a CIDR prefix (want e.g. " + def + ")"}
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, &ConfigError{Field: field, Value: v, Msg: "not an IPv4 prefix"}
	}
	return p.Masked(), nil
}

// twin is the IPv6 twin of an IPv4 VIP in prefix p (at most /96).
func twin(p netip.Prefix, v4 uint32) netip.Addr {
	b := p.Addr().As16()
	b[12], b[13], b[14], b[15] = byte(v4>>24), byte(v4>>16), byte(v4>>8), byte(v4)
	return netip.AddrFrom16(b)
}

// twinOf returns the IPv4 VIP of an IPv6 twin in p.
func twinOf(p netip.Prefix, a netip.Addr) (uint32, bool) {
	if !p.IsValid() || !a.Is6() || !p.Contains(a) {
		return 0, false
	}
	b := a.As16()
	pb := p.Addr().As16()
	for i := p.Bits() / 8; i < 12; i++ { // bits between the prefix and the low 32 are zero
		if b[i] != pb[i] {
			return 0, false
		}
	}
	return uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15]), true
}

func v4u(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
