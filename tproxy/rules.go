package tproxy

import (
	"fmt"
	"strconv"
	"strings"
)

// ChainPrefix starts the name of every chain the transparent proxy owns.
const ChainPrefix = "KUMA_MESH_"

// CommentPrefix starts the comment of every rule the transparent proxy adds.
const CommentPrefix = "kuma-dp/"

// The chains we own.
const (
	chainInbound          = ChainPrefix + "INBOUND"
	chainInboundRedirect  = ChainPrefix + "INBOUND_REDIRECT"
	chainOutbound         = ChainPrefix + "OUTBOUND"
	chainOutboundRedirect = ChainPrefix + "OUTBOUND_REDIRECT"
	chainDNS              = ChainPrefix + "DNS"
)

// comments are every comment our rules carry (after CommentPrefix): with the chains, the
// exact list of what is ours (see isOurs); builder.add refuses any other.
var comments = []string{
	"dns-zone-local-upstream", "dns-zone-agent-upstream", "dns-zone-excluded-user", "dns-zone-resolver-answer", "dns-zone-app-query",
	"dns-zone-forwarded-query", "dns-zone-upstream-answer",
	"inbound", "outbound", "dns-udp", "dns-tcp", "exclude-inbound-port", "inbound-redirect",
	"inbound-passthrough", "agent-to-local-app", "agent", "exclude-outbound-ports-for-uids",
	"app-loopback", "loopback", "exclude-outbound-port", "exclude-outbound-ip", "outbound-redirect",
	"dns-redirect",
}

// rule is one rule in the canonical form iptables-save prints it (legacy and nft agree), so
// that live rules compare to expected ones line by line.
type rule struct {
	chain string
	spec  string // everything after "-A chain", comment included
}

func (r rule) String() string { return "-A " + r.chain + " " + r.spec }

// table is our part of one iptables table.
type table struct {
	name   string
	chains []string // chains we create, in declaration order
	rules  []rule
}

// ruleSet is our part of the whole ruleset of one family.
type ruleSet struct {
	family Family
	tables []table // raw, nat
}

// isBuiltin reports whether a chain is one of the kernel's (PREROUTING, OUTPUT...).
func isBuiltin(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// Rules is the iptables-restore input (for `--noflush`) that installs the transparent proxy
// for one family on a host where none of it is installed. Deterministic.
func Rules(c Config, family Family) (string, error) {
	rs, err := buildRules(c, family)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# kuma-dp transparent proxy, %s (iptables-restore --noflush)\n", family)
	for _, t := range rs.tables {
		writeInstall(&b, t)
	}
	return b.String(), nil
}

// writeInstall writes one table's block: declare our chains, insert our jumps at the top of
// the built-in chains (ahead of e.g. Docker's DNS DNAT), append our chains' rules.
func writeInstall(b *strings.Builder, t table) {
	fmt.Fprintf(b, "*%s\n", t.name)
	for _, ch := range t.chains {
		fmt.Fprintf(b, ":%s - [0:0]\n", ch)
	}
	writeRules(b, t.rules)
	b.WriteString("COMMIT\n")
}

func writeRules(b *strings.Builder, rules []rule) {
	pos := map[string]int{}
	for _, r := range rules {
		if isBuiltin(r.chain) {
			pos[r.chain]++
			fmt.Fprintf(b, "-I %s %d %s\n", r.chain, pos[r.chain], r.spec)
			continue
		}
		fmt.Fprintf(b, "-A %s %s\n", r.chain, r.spec)
	}
}

// familyAddrs are the loopback network of a family (all of 127.0.0.0/8: local resolvers
// such as systemd-resolved's 127.0.0.53 live there) and the source Envoy uses for inbound
// passthrough (127.0.0.6 / ::6).
func familyAddrs(f Family) (loopback, passthrough string) {
	if f == IPv6 {
		return "::1/128", "::6/128"
	}
	return "127.0.0.0/8", "127.0.0.6/32"
}

// builder collects rules of one table.
type builder struct{ t table }

// add appends a rule; match must already be in iptables-save's order
// (-s, -d, -i, -o, -p, then -m modules as written).
func (bd *builder) add(chain, match, comment, target string) {
	if !ourComments[CommentPrefix+comment] {
		panic("tproxy: comment " + comment + " is not in the comments list: uninstall would not know the rule")
	}
	spec := fmt.Sprintf("-m comment --comment %q -j %s", CommentPrefix+comment, target)
	if match != "" {
		spec = match + " " + spec
	}
	bd.t.rules = append(bd.t.rules, rule{chain: chain, spec: spec})
}

func buildRules(c Config, f Family) (ruleSet, error) {
	rc, err := newRuleContext(c, f)
	if err != nil {
		return ruleSet{}, err
	}
	rs := ruleSet{family: f}
	if c.RedirectDNS && c.ConntrackZoneSplit {
		rs.tables = append(rs.tables, rc.dnsConntrackZones())
	}
	nat := rc.natEntryJumps()
	rc.inboundRules(&nat)
	rc.outboundRules(&nat)
	if c.RedirectDNS {
		rc.dnsRules(&nat)
	}
	rs.tables = append(rs.tables, nat.t)
	return rs, nil
}

// ruleContext is what every step of buildRules shares: the validated config, the family,
// the agent's owner matches and its loopback and passthrough addresses.
type ruleContext struct {
	c               Config
	f               Family
	owner, notOwner string // -m owner matches of the agent's UID
	puids           []PortsForUIDs
	lo, passthrough string
}

func newRuleContext(c Config, f Family) (ruleContext, error) {
	if err := c.Validate(); err != nil {
		return ruleContext{}, err
	}
	uid, err := c.UID()
	if err != nil {
		return ruleContext{}, err
	}
	rc := ruleContext{c: c, f: f,
		owner:    fmt.Sprintf("-m owner --uid-owner %d", uid),
		notOwner: fmt.Sprintf("-m owner ! --uid-owner %d", uid)}
	for _, s := range c.ExcludeOutboundPortsForUIDs {
		p, _ := ParsePortsForUIDs(s) // validated above
		rc.puids = append(rc.puids, p)
	}
	rc.lo, rc.passthrough = familyAddrs(f)
	return rc, nil
}

// dnsConntrackZones is the raw table splitting DNS into conntrack zones. kumahq/kuma#3459:
// the resolver's upstream queries and the applications' queries (NATed to the resolver) may
// reuse the same source port; in one conntrack zone the second flow clashes with the first
// and its answer is lost. The agent's upstream flows live in zone 1, the redirected
// application flows in zone 2. CT attaches only the first zone that matches, so order
// matters. The queries of users whose DNS is excluded (--exclude-outbound-ports-for-uids
// udp:53:UID) go upstream too, so they live in zone 1 with their answers: in zone 2 the
// answer matched no connection and a stateful firewall dropped it.
func (rc ruleContext) dnsConntrackZones() table {
	raw := builder{t: table{name: "raw"}}
	excluded := rc.excludedDNSOwners()
	// Their queries to a resolver on this host (Docker's 127.0.0.11, which Docker DNATs to
	// its real port; systemd-resolved's 127.0.0.53) are answered from this host: the answer
	// leaves through OUTPUT, where no rule sets a zone, so the query stays in the default
	// zone with it ("CT" is CT --zone 0). In zone 1 Docker's DNAT was never undone on the
	// answer, and the agent could not use Docker's resolver as its upstream.
	for _, owner := range append([]string{rc.owner}, excluded...) {
		raw.add("OUTPUT", "-p udp -m udp --dport 53 -m addrtype --dst-type LOCAL "+owner, "dns-zone-local-upstream", "CT")
	}
	raw.add("OUTPUT", "-p udp -m udp --dport 53 "+rc.owner, "dns-zone-agent-upstream", "CT --zone 1")
	for _, owner := range excluded {
		raw.add("OUTPUT", "-p udp -m udp --dport 53 "+owner, "dns-zone-excluded-user", "CT --zone 1")
	}
	raw.add("OUTPUT", fmt.Sprintf("-p udp -m udp --sport %d %s", rc.c.RedirectDNSPort, rc.owner), "dns-zone-resolver-answer", "CT --zone 2")
	raw.add("OUTPUT", "-p udp -m udp --dport 53", "dns-zone-app-query", "CT --zone 2")
	// A host routing for others (Docker's containers) forwards their queries: they live in
	// zone 1 too, or their answers (zone 1 below) would miss the query's MASQUERADE.
	raw.add("PREROUTING", "-p udp -m udp --dport 53 -m addrtype ! --dst-type LOCAL", "dns-zone-forwarded-query", "CT --zone 1")
	raw.add("PREROUTING", "-p udp -m udp --sport 53", "dns-zone-upstream-answer", "CT --zone 1")
	return raw.t
}

// natEntryJumps is the nat table with our chains and the jumps into them from the built-in
// chains.
func (rc ruleContext) natEntryJumps() builder {
	nat := builder{t: table{name: "nat", chains: []string{chainInbound, chainInboundRedirect, chainOutbound, chainOutboundRedirect}}}
	if rc.c.RedirectDNS {
		nat.t.chains = append(nat.t.chains, chainDNS)
	}
	// Inbound is what is addressed to this host: a host that routes for others (Docker's
	// containers behind a bridge) passes their connections through PREROUTING too, and
	// they must go on to their destination, not to Envoy's inbound listener.
	nat.add("PREROUTING", "-p tcp -m addrtype --dst-type LOCAL", "inbound", chainInbound)
	nat.add("OUTPUT", "-p tcp", "outbound", chainOutbound)
	if rc.c.RedirectDNS {
		nat.add("OUTPUT", "-p udp -m udp --dport 53", "dns-udp", chainDNS)
	}
	return nat
}

// inboundRules redirect inbound TCP to Envoy's inbound port, but the excluded ports.
func (rc ruleContext) inboundRules(nat *builder) {
	for _, p := range rc.c.ExcludeInboundPorts {
		nat.add(chainInbound, fmt.Sprintf("-p tcp -m tcp --dport %d", p), "exclude-inbound-port", "RETURN")
	}
	nat.add(chainInbound, "-p tcp", "inbound", chainInboundRedirect)
	nat.add(chainInboundRedirect, "-p tcp", "inbound-redirect", fmt.Sprintf("REDIRECT --to-ports %d", rc.c.RedirectInboundPort))
}

// outboundRules redirect the applications' outbound TCP to Envoy's outbound port, leaving
// alone the agent's own traffic, loopback traffic and the exclusions.
func (rc ruleContext) outboundRules(nat *builder) {
	// Envoy's inbound passthrough connects from 127.0.0.6 (::6) to the application: leave it.
	nat.add(chainOutbound, "-s "+rc.passthrough+" -o lo", "inbound-passthrough", "RETURN")
	// Envoy calling its own workload through the pod address (over lo) goes through inbound;
	// the agent's own loopback traffic (its upstream resolver at 127.0.0.53) does not.
	nat.add(chainOutbound, "! -d "+rc.lo+" -o lo -m addrtype --dst-type LOCAL "+rc.owner, "agent-to-local-app", chainInboundRedirect)
	// The agent's and Envoy's own traffic (upstream DNS, connections to services) is never looped.
	nat.add(chainOutbound, rc.owner, "agent", "RETURN")
	rc.portsForUIDs(nat, chainOutbound, "tcp")
	if rc.c.RedirectDNS {
		// DNS goes to the resolver whatever the nameserver, 127.0.0.53 and 127.0.0.11 included.
		nat.add(chainOutbound, "-p tcp -m tcp --dport 53", "dns-tcp", chainDNS)
	}
	// Applications talking to themselves over the loopback or their own addresses: leave it.
	// Only to local addresses: a VIP range routed through lo (240.0.0.0/4 dev lo) has none
	// there, and its connections must still go to Envoy.
	nat.add(chainOutbound, "-o lo -m addrtype --dst-type LOCAL "+rc.notOwner, "app-loopback", "RETURN")
	nat.add(chainOutbound, "-d "+rc.lo, "loopback", "RETURN")
	for _, p := range rc.c.ExcludeOutboundPorts {
		nat.add(chainOutbound, fmt.Sprintf("-p tcp -m tcp --dport %d", p), "exclude-outbound-port", "RETURN")
	}
	for _, p := range rc.c.ExcludeOutboundIPs {
		if familyOf(p.Addr()) != rc.f {
			continue
		}
		// A /0 is no address match at all: iptables-save prints none, so neither do we.
		match := ""
		if p.Bits() > 0 {
			match = "-d " + p.Masked().String()
		}
		nat.add(chainOutbound, match, "exclude-outbound-ip", "RETURN")
	}
	nat.add(chainOutbound, "", "outbound", chainOutboundRedirect)
	nat.add(chainOutboundRedirect, "-p tcp", "outbound-redirect", fmt.Sprintf("REDIRECT --to-ports %d", rc.c.RedirectOutboundPort))
}

// dnsRules redirect the applications' DNS (UDP and TCP) to the resolver, but the agent's own.
func (rc ruleContext) dnsRules(nat *builder) {
	nat.add(chainDNS, rc.owner, "agent", "RETURN")
	rc.portsForUIDs(nat, chainDNS, "udp")
	nat.add(chainDNS, "-p udp", "dns-redirect", fmt.Sprintf("REDIRECT --to-ports %d", rc.c.RedirectDNSPort))
	nat.add(chainDNS, "-p tcp", "dns-redirect", fmt.Sprintf("REDIRECT --to-ports %d", rc.c.RedirectDNSPort))
}

// portsForUIDs leaves alone, in chain, the protocol's traffic of the excluded ports and UIDs.
func (rc ruleContext) portsForUIDs(nat *builder, chain, protocol string) {
	for _, p := range rc.puids {
		if !contains(p.Protocols, protocol) {
			continue
		}
		for _, m := range portsForUIDsMatches(protocol, p) {
			nat.add(chain, m, "exclude-outbound-ports-for-uids", "RETURN")
		}
	}
}

// portsForUIDsMatches renders one entry as matches: one per UID spec, ports grouped by 15
// (the multiport limit; a range counts twice).
func portsForUIDsMatches(proto string, p PortsForUIDs) []string {
	var portGroups []string
	var cur []string
	weight := 0
	for _, ps := range p.Ports {
		w := 1
		if strings.Contains(ps, ":") {
			w = 2
		}
		if weight+w > 15 {
			portGroups = append(portGroups, strings.Join(cur, ","))
			cur, weight = nil, 0
		}
		cur = append(cur, ps)
		weight += w
	}
	if len(cur) > 0 {
		portGroups = append(portGroups, strings.Join(cur, ","))
	}
	if len(portGroups) == 0 {
		portGroups = []string{""}
	}
	var out []string
	for _, uid := range p.UIDs {
		for _, pg := range portGroups {
			m := "-p " + proto
			if pg != "" {
				m += " -m multiport --dports " + pg
			}
			out = append(out, m+" -m owner --uid-owner "+uid)
		}
	}
	return out
}

// excludedDNSOwners are the owner matches of the users whose UDP DNS is excluded
// (--exclude-outbound-ports-for-uids udp:53:UID): their queries go upstream.
func (rc ruleContext) excludedDNSOwners() []string {
	var out []string
	for _, p := range rc.puids {
		if !contains(p.Protocols, "udp") || !coversPort(p.Ports, 53) {
			continue
		}
		for _, uid := range p.UIDs {
			out = append(out, "-m owner --uid-owner "+uid)
		}
	}
	return out
}

// coversPort reports whether iptables port specs ("80", "1000:2000"; nil is every port)
// include port.
func coversPort(specs []string, port uint64) bool {
	if specs == nil {
		return true
	}
	for _, s := range specs {
		from, to, isRange := strings.Cut(s, ":")
		if !isRange {
			to = from
		}
		a, err1 := strconv.ParseUint(from, 10, 16)
		b, err2 := strconv.ParseUint(to, 10, 16)
		if err1 == nil && err2 == nil && a <= port && port <= b {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
