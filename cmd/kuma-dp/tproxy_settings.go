package main

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/internal/settings"
	"github.com/kumadp/kuma-dp/tproxy"
)

const tproxyEnvPrefix = "KUMA_TRANSPARENT_PROXY_"

// tproxySettings is every setting of tproxy, each named once: its flag (Kuma's name), its
// environment variable (KUMA_TRANSPARENT_PROXY_ and the flag in capitals) and its config file
// key (the JSON name of the tproxy.Config field).
var tproxySettings = &settings.Table[tproxy.Config]{
	ConfigUsage: "YAML file with any setting (keys: docs/tproxy.md); environment and flags override it",
	Scalars: settings.Scalars{reflect.TypeFor[netip.Prefix](): func(s string) (any, error) {
		p, err := parsePrefix(s)
		return p.String(), err
	}},
	Types: map[reflect.Type]func(field any) pflag.Value{
		reflect.TypeFor[uint16](): func(f any) pflag.Value { return settings.Parsed(f.(*uint16), "port", parsePort) },
		reflect.TypeFor[[]uint16](): func(f any) pflag.Value {
			return settings.List(f.(*[]uint16), ",", "ports", parsePort)
		},
		reflect.TypeFor[[]netip.Prefix](): func(f any) pflag.Value {
			return settings.List(f.(*[]netip.Prefix), ",", "cidrs", parsePrefix)
		},
	},
	Settings: []settings.Setting[tproxy.Config]{
		tproxySetting("redirect-outbound-port", "redirectOutboundPort", "port receiving outbound TCP (Envoy's outbound listener)", nil),
		tproxySetting("redirect-inbound-port", "redirectInboundPort", "port receiving inbound TCP (Envoy's inbound listener)", nil),
		tproxySetting("redirect-dns-port", "redirectDNSPort", "port of the resolver receiving DNS, UDP and TCP", nil),
		tproxySetting("redirect-dns", "redirectDNS", "redirect the applications' DNS (UDP and TCP port 53, any nameserver) to the resolver", nil),
		tproxySetting("skip-dns-conntrack-zone-split", "conntrackZoneSplit", "do not split DNS into conntrack zones (kumahq/kuma#3459)",
			func(c *tproxy.Config) pflag.Value { return settings.Not(&c.ConntrackZoneSplit) }),
		tproxySetting("kuma-dp-user", "kumaDPUser", "user (name or UID) the agent and Envoy run as; its traffic is never redirected", nil),
		tproxySetting("exclude-inbound-ports", "excludeInboundPorts", "inbound ports not redirected (comma list or repeated)", nil),
		tproxySetting("exclude-outbound-ports", "excludeOutboundPorts", "outbound TCP ports not redirected (comma list or repeated)", nil),
		tproxySetting("exclude-outbound-ips", "excludeOutboundIPs", "outbound destinations (IPs or CIDRs) not redirected (comma list or repeated)", nil),
		tproxySetting("exclude-outbound-ports-for-uids", "excludeOutboundPortsForUIDs",
			`"[tcp|udp|*:]ports:uids" not redirected, e.g. "tcp:80,443:1000-1010" (repeat the flag; ";" between entries in the environment)`,
			func(c *tproxy.Config) pflag.Value {
				return settings.List(&c.ExcludeOutboundPortsForUIDs, ";", "entries", func(s string) (string, error) { return s, nil })
			}),
		tproxySetting("ip-family-mode", "ipFamilyMode", "dualstack (IPv4 and IPv6 rules) or ipv4", nil),
		tproxySetting("iptables-executables", "iptablesExecutables", "auto (the backend the host already uses), legacy or nft", nil),
		tproxySetting("vip-ranges", "vipRanges", "VIP ranges made routable when no route covers them", nil),
		tproxySetting("state-file", "stateFile", "file remembering the routes and addresses install added", nil),
		tproxySetting("netns", "netns", "apply inside this named network namespace (ip netns), e.g. from a CNI or for tests", nil),
	},
}

// tproxySetting is a setting whose environment variable is derived from its flag; bind, when
// not nil, replaces the binding by the field's type.
func tproxySetting(flag, field, usage string, bind func(c *tproxy.Config) pflag.Value) settings.Setting[tproxy.Config] {
	return settings.Setting[tproxy.Config]{Flag: flag, Field: field, Usage: usage, Bind: bind,
		Env: tproxyEnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return uint16(n), nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
