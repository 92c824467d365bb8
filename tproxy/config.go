package tproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/user"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
)

// Config is what the transparent proxy redirects and what it leaves alone. The JSON names are
// the keys of the YAML config file; the flag names (in errors) are Kuma's.
type Config struct {
	// RedirectOutboundPort receives the application's outbound TCP (Envoy's outbound listener).
	RedirectOutboundPort uint16 `json:"redirectOutboundPort"`
	// RedirectInboundPort receives inbound TCP (Envoy's inbound listener).
	RedirectInboundPort uint16 `json:"redirectInboundPort"`
	// RedirectDNSPort receives DNS (UDP and TCP port 53) when RedirectDNS is set.
	RedirectDNSPort uint16 `json:"redirectDNSPort"`
	// RedirectDNS sends every DNS query of the applications to RedirectDNSPort.
	RedirectDNS bool `json:"redirectDNS"`
	// ConntrackZoneSplit puts the agent's upstream DNS and the applications' DNS in different
	// conntrack zones (the source-port-reuse race of kumahq/kuma#3459). Needs RedirectDNS.
	ConntrackZoneSplit bool `json:"conntrackZoneSplit"`
	// KumaDPUser is the user (name or UID) that the agent and Envoy run as; its traffic is
	// never redirected.
	KumaDPUser string `json:"kumaDPUser"`
	// ExcludeInboundPorts are inbound TCP ports left alone.
	ExcludeInboundPorts []uint16 `json:"excludeInboundPorts,omitempty"`
	// ExcludeOutboundPorts are outbound TCP destination ports left alone.
	ExcludeOutboundPorts []uint16 `json:"excludeOutboundPorts,omitempty"`
	// ExcludeOutboundIPs are outbound destinations (addresses or CIDRs) left alone.
	ExcludeOutboundIPs []netip.Prefix `json:"excludeOutboundIPs,omitempty"`
	// ExcludeOutboundPortsForUIDs are "[tcp|udp|*:]ports:uids" entries, as in Kuma:
	// "80,443:1000", "tcp:8000-8080:1000-1010", "*:*:42".
	ExcludeOutboundPortsForUIDs []string `json:"excludeOutboundPortsForUIDs,omitempty"`
	// IPFamilyMode is "dualstack" (IPv4 and IPv6 rules) or "ipv4".
	IPFamilyMode string `json:"ipFamilyMode"`
	// Executables picks the iptables backend: "auto" (what the host already uses), "legacy"
	// or "nft".
	Executables string `json:"iptablesExecutables"`
	// VIPRanges are made routable (a route via the loopback when no route covers them).
	VIPRanges []netip.Prefix `json:"vipRanges,omitempty"`
	// StateFile remembers the routes and addresses Install added, for Uninstall.
	StateFile string `json:"stateFile"`
	// NetNS, when set, applies everything inside that named network namespace (ip netns).
	NetNS string `json:"netns,omitempty"`
}

// Family is an IP family: IPv4 or IPv6.
type Family int

// The two families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// LogValue logs a family as "ipv4" or "ipv6".
func (f Family) LogValue() slog.Value { return slog.StringValue(f.String()) }

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// DefaultConfig is Kuma's default transparent proxy.
func DefaultConfig() Config {
	return Config{
		RedirectOutboundPort: 15001,
		RedirectInboundPort:  15006,
		RedirectDNSPort:      15053,
		RedirectDNS:          true,
		ConntrackZoneSplit:   true,
		KumaDPUser:           "5678",
		IPFamilyMode:         "dualstack",
		Executables:          "auto",
		VIPRanges: []netip.Prefix{
			netip.MustParsePrefix("240.0.0.0/4"),
			netip.MustParsePrefix("fd00:fd00::/64"),
		},
		StateFile: "/run/kuma-dp/tproxy-state.json",
	}
}

// Families are the IP families the config applies to.
func (c Config) Families() []Family {
	if c.IPFamilyMode == "ipv4" {
		return []Family{IPv4}
	}
	return []Family{IPv4, IPv6}
}

// Validate reports every invalid field, each naming its flag and the offending value.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag string, v any, why string) {
		errs = append(errs, fmt.Errorf("--%s=%v: %s", flag, v, why))
	}
	ports := map[string]uint16{
		"redirect-outbound-port": c.RedirectOutboundPort,
		"redirect-inbound-port":  c.RedirectInboundPort,
	}
	if c.RedirectDNS {
		ports["redirect-dns-port"] = c.RedirectDNSPort
	}
	for _, f := range []string{"redirect-outbound-port", "redirect-inbound-port", "redirect-dns-port"} {
		if p, ok := ports[f]; ok && p == 0 {
			bad(f, p, "must be between 1 and 65535")
		}
	}
	if c.RedirectOutboundPort != 0 && c.RedirectOutboundPort == c.RedirectInboundPort {
		bad("redirect-inbound-port", c.RedirectInboundPort, "must differ from --redirect-outbound-port")
	}
	// TCP DNS goes to the resolver's TCP port: Envoy's listener cannot be there too.
	if c.RedirectDNS && c.RedirectDNSPort != 0 {
		for _, other := range []struct {
			flag string
			port uint16
		}{{"redirect-outbound-port", c.RedirectOutboundPort}, {"redirect-inbound-port", c.RedirectInboundPort}} {
			if c.RedirectDNSPort == other.port {
				bad("redirect-dns-port", c.RedirectDNSPort, "must differ from --"+other.flag+" (DNS over TCP goes there)")
			}
		}
	}
	if _, err := c.UID(); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.ExcludeInboundPorts {
		if p == 0 {
			bad("exclude-inbound-ports", p, "port must be between 1 and 65535")
		}
	}
	for _, p := range c.ExcludeOutboundPorts {
		if p == 0 {
			bad("exclude-outbound-ports", p, "port must be between 1 and 65535")
		}
	}
	for _, p := range c.ExcludeOutboundIPs {
		if why := prefixProblem(p, "not an address or CIDR"); why != "" {
			bad("exclude-outbound-ips", p, why)
		}
	}
	for _, p := range c.VIPRanges {
		if why := prefixProblem(p, "not a CIDR"); why != "" {
			bad("vip-ranges", p, why)
		} else if why := vipRangeProblem(p); why != "" {
			bad("vip-ranges", p, why)
		}
	}
	for _, s := range c.ExcludeOutboundPortsForUIDs {
		if _, err := ParsePortsForUIDs(s); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NetNS != "" && !validNetNSName(c.NetNS) {
		bad("netns", strconv.Quote(c.NetNS), "not a network namespace name (ip netns list shows them)")
	}
	switch c.IPFamilyMode {
	case "dualstack", "ipv4":
	default:
		bad("ip-family-mode", strconv.Quote(c.IPFamilyMode), `must be "dualstack" or "ipv4"`)
	}
	switch c.Executables {
	case "auto", "legacy", "nft":
	default:
		bad("iptables-executables", strconv.Quote(c.Executables), `must be "auto", "legacy" or "nft"`)
	}
	return errors.Join(errs...)
}

// validNetNSName is what ip netns accepts as a name: a file name in /run/netns.
func validNetNSName(s string) bool {
	return s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// checkNetNS refuses a --netns that names no network namespace: every action would find
// nothing there (uninstall: "nothing to remove") while the namespace meant keeps its rules.
func (c Config) checkNetNS() error {
	if c.NetNS == "" {
		return nil
	}
	if !validNetNSName(c.NetNS) {
		return fmt.Errorf("--netns=%q: not a network namespace name (ip netns list shows them)", c.NetNS)
	}
	ns, err := netns.GetFromName(c.NetNS)
	if err != nil {
		return fmt.Errorf("--netns=%q: no such network namespace (ip netns list shows them): %v", c.NetNS, err)
	}
	return ns.Close()
}

// prefixProblem says what is wrong with p as an iptables address ("" when nothing): an
// IPv4-mapped IPv6 prefix (::ffff:10.0.0.1) is neither family to iptables - ip6tables never
// sees IPv4 packets, and iptables refuses the address.
func prefixProblem(p netip.Prefix, invalid string) string {
	if !p.IsValid() {
		return invalid
	}
	if p.Addr().Is4In6() {
		if p.Bits() >= 96 {
			return fmt.Sprintf("an IPv4-mapped IPv6 address: write the IPv4 form (%s)", netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked())
		}
		return "an IPv4-mapped IPv6 prefix: write the IPv4 or the IPv6 range itself"
	}
	return ""
}

// vipRangeProblem says what is wrong with p as a VIP range ("" when nothing): install adds
// an on-link route for a range no route covers, so a range of every address became a
// default route through the first interface; and VIPs on the loopback are never redirected
// (connections to the loopback are left alone).
func vipRangeProblem(p netip.Prefix) string {
	if p.Bits() == 0 {
		return "covers every address (install would add a default route): give the VIPs a range of their own, e.g. 240.0.0.0/4"
	}
	for _, lo := range []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")} {
		if p.Overlaps(lo) {
			return "overlaps the loopback (" + lo.String() + "): give the VIPs a range of their own, e.g. 240.0.0.0/4"
		}
	}
	return ""
}

// maxUID is the largest UID the owner match takes (iptables refuses 4294967295, (uid_t)-1).
const maxUID = 1<<32 - 2

// UID resolves KumaDPUser (a UID or a user name) to a numeric UID.
func (c Config) UID() (uint32, error) {
	s := strings.TrimSpace(c.KumaDPUser)
	if s == "" {
		return 0, fmt.Errorf("--kuma-dp-user=%q: must be a user name or UID", c.KumaDPUser)
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n > maxUID {
			return 0, fmt.Errorf("--kuma-dp-user=%q: a UID is at most %d", c.KumaDPUser, uint64(maxUID))
		}
		return uint32(n), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, fmt.Errorf("--kuma-dp-user=%q: %v", c.KumaDPUser, err)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("--kuma-dp-user=%q: uid %q is not numeric", c.KumaDPUser, u.Uid)
	}
	return uint32(n), nil
}

// PortsForUIDs is one parsed --exclude-outbound-ports-for-uids entry.
type PortsForUIDs struct {
	Protocols []string // "tcp", "udp" or both
	Ports     []string // iptables port specs ("80", "1000:2000"); nil means every port
	UIDs      []string // iptables owner specs ("1000", "1000-2000")
}

// ParsePortsForUIDs parses "[tcp|udp|*:]ports:uids"; ports is "*" or a comma list of ports
// and ranges ("80,8000-8080"), uids a comma list of UIDs and ranges.
func ParsePortsForUIDs(s string) (PortsForUIDs, error) {
	fail := func(why string) (PortsForUIDs, error) {
		return PortsForUIDs{}, fmt.Errorf("--exclude-outbound-ports-for-uids=%q: %s", s, why)
	}
	parts := strings.Split(s, ":")
	proto := "*"
	switch len(parts) {
	case 2:
	case 3:
		proto, parts = parts[0], parts[1:]
	default:
		return fail(`want "[protocol:]ports:uids", e.g. "tcp:80,443:1000-1010"`)
	}
	var out PortsForUIDs
	switch strings.ToLower(proto) {
	case "*":
		out.Protocols = []string{"tcp", "udp"}
	case "tcp", "udp":
		out.Protocols = []string{strings.ToLower(proto)}
	default:
		return fail(fmt.Sprintf("protocol %q: must be tcp, udp or *", proto))
	}
	if parts[0] != "*" {
		ps, err := parseRanges(parts[0], 1, 65535, ":")
		if err != nil {
			return fail("ports: " + err.Error())
		}
		out.Ports = ps
	}
	uids, err := parseRanges(parts[1], 0, maxUID, "-")
	if err != nil {
		return fail("uids: " + err.Error())
	}
	out.UIDs = uids
	return out, nil
}

// parseRanges parses "a,b-c" into iptables specs, joining ranges with sep.
func parseRanges(s string, lo, hi uint64, sep string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		from, to, isRange := strings.Cut(item, "-")
		a, err := parseBounded(from, lo, hi)
		if err != nil {
			return nil, err
		}
		if !isRange {
			out = append(out, strconv.FormatUint(a, 10))
			continue
		}
		b, err := parseBounded(to, lo, hi)
		if err != nil {
			return nil, err
		}
		switch {
		case b < a:
			return nil, fmt.Errorf("range %q is reversed", item)
		case b == a: // multiport refuses 80:80, and the owner match prints 7-7 as 7
			out = append(out, strconv.FormatUint(a, 10))
		default:
			out = append(out, fmt.Sprintf("%d%s%d", a, sep, b))
		}
	}
	return out, nil
}

func parseBounded(s string, lo, hi uint64) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q is not a number between %d and %d", s, lo, hi)
	}
	return n, nil
}
