package tproxy

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sort"
	"strings"
)

// The rules of others, as far as they meet ours: another installer holding our chain names,
// another backend's nat rules, redirects after ours, rules put ahead of ours. We never
// change them; install refuses, warns or puts ours back on top, verify names them.

// refuseHeldChains stops an install, before anything changes, where another installer
// holds chains with our names (Kuma's kumactl names its chains as we do): declaring them
// would flush its rules, and no uninstall could give them back.
// It returns the iptables-save output it read, per family, for install to go on with.
func refuseHeldChains(ctx context.Context, c Config, b backend) (map[Family]string, error) {
	var errs []error
	saves := map[Family]string{}
	for _, f := range c.Families() {
		save, err := b.save(ctx, c, f)
		if err != nil {
			return nil, err
		}
		saves[f] = save
		_, held := parseSave(save)
		for _, h := range held {
			errs = append(errs, fmt.Errorf("%s (iptables-%s) %s", f, b.name, h))
		}
	}
	if len(errs) == 0 {
		return saves, nil
	}
	return nil, fmt.Errorf("%w\nanother transparent proxy uses our chain names (Kuma's `kumactl install transparent-proxy` does: "+
		"`kumactl uninstall transparent-proxy` removes it), or the rule was added by hand: remove it first; nothing was changed", errors.Join(errs...))
}

// warnOtherBackendNAT says when the backend we do not use holds nat rules of others (save
// is its iptables-save output for family f): both backends act on every packet, and the nat
// table the kernel registered last acts first, so those rules may come before ours (a DNAT
// taking DNS ours would redirect).
func warnOtherBackendNAT(log *slog.Logger, f Family, other backend, save string) {
	if rules := foreignRules(save, "nat"); len(rules) > 0 {
		log.Warn("the other iptables backend holds nat rules too: both act on every packet, and whichever nat table the kernel registered last acts first, maybe before ours",
			"family", f, "backend", other.name, "rules", len(rules), "first", rules[0])
	}
}

// warnKept logs the chains of ours that want no longer has but that stay, emptied, because
// a rule not ours jumps to them.
func warnKept(log *slog.Logger, f Family, b backend, live, want []table, kept map[string]string) {
	wanted := map[string]bool{}
	for _, t := range want {
		for _, ch := range t.chains {
			wanted[ch] = true
		}
	}
	for _, t := range live {
		for _, ch := range t.chains {
			if rule, inUse := kept[ch]; inUse && !wanted[ch] {
				log.Warn("chain of ours emptied but kept: a rule not ours jumps to it; delete that rule, then install or uninstall again",
					"family", f, "backend", b.name, "table", t.name, "chain", ch, "rule", rule)
			}
		}
	}
}

// foreignRules are the rule lines of an iptables-save output that are not ours, in table
// tbl ("" for every table).
func foreignRules(save, tbl string) []string {
	var out []string
	for cur, line := range saveRules(save) {
		if (tbl == "" || cur == tbl) && !isOurs(cur, line) {
			out = append(out, line)
		}
	}
	return out
}

// saveRules yields each rule line of an iptables-save output ("-A CHAIN ...", trimmed) with
// the table it is in.
func saveRules(save string) iter.Seq2[string, string] {
	return func(yield func(table, line string) bool) {
		cur := ""
		for line := range strings.SplitSeq(save, "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "*"):
				cur = line[1:]
			case strings.HasPrefix(line, "-A "):
				if !yield(cur, line) {
					return
				}
			}
		}
	}
}

// foreignChains are the rules not ours of one table of an iptables-save output, by chain,
// in order.
func foreignChains(save, tbl string) map[string][]string {
	chains := map[string][]string{}
	for cur, line := range saveRules(save) {
		if cur == tbl && !isOurs(cur, line) {
			f := strings.Fields(line)
			chains[f[1]] = append(chains[f[1]], line)
		}
	}
	return chains
}

// ruleTargets are the targets (-j, -g) of an iptables-save rule line.
func ruleTargets(line string) []string {
	var out []string
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			out = append(out, f[i+1])
		}
	}
	return out
}

// reaches reports the rules not ours with one of targets that chain reaches, directly or
// through chains not ours, in order (each once).
func reaches(chains map[string][]string, chain string, targets map[string]bool) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(chain string)
	walk = func(chain string) {
		if seen[chain] || isOurChain("nat", chain) {
			return
		}
		seen[chain] = true
		for _, line := range chains[chain] {
			for _, t := range ruleTargets(line) {
				if targets[t] {
					out = append(out, line)
				} else {
					walk(t)
				}
			}
		}
	}
	walk(chain)
	return out
}

// foreignRedirects are the REDIRECT rules not ours that nat's OUTPUT and PREROUTING reach,
// directly or through chains not ours (another transparent proxy's leftovers: Istio's
// ISTIO_REDIRECT). Ours return what they leave alone (the agent's own connections,
// excluded ports) to the chain, so those rules catch it next.
func foreignRedirects(save string) []string {
	chains := foreignChains(save, "nat")
	redirect := map[string]bool{"REDIRECT": true}
	return append(reaches(chains, "OUTPUT", redirect), reaches(chains, "PREROUTING", redirect)...)
}

// aheadOfOurs are the rules not ours that sit ahead of one of ours in a built-in chain and
// can take a packet from us: in nat, one that reaches a DNAT or REDIRECT (Docker's DNS
// DNAT inserted again at the top); in raw, one that reaches NOTRACK or CT. Install puts our
// rules back on top of them; verify names them.
func aheadOfOurs(save string) []string {
	var out []string
	for tbl, targets := range map[string]map[string]bool{
		"nat": {"DNAT": true, "REDIRECT": true},
		"raw": {"NOTRACK": true, "CT": true},
	} {
		chains := foreignChains(save, tbl)
		cur := ""
		var ahead map[string][]string // built-in chain -> rules not ours seen so far
		for _, line := range strings.Split(save, "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "*"):
				cur, ahead = line[1:], map[string][]string{}
			case cur != tbl || !strings.HasPrefix(line, "-A "):
			default:
				chain := strings.Fields(line)[1]
				if !isBuiltin(chain) {
					continue
				}
				if !isOurs(cur, line) {
					ahead[chain] = append(ahead[chain], line)
					continue
				}
				for _, r := range ahead[chain] {
					if reachesVia(chains, r, targets) {
						out = append(out, tbl+": "+r)
					}
				}
				ahead[chain] = nil
			}
		}
	}
	sort.Strings(out)
	return out
}

// reachesVia reports whether rule line has one of targets or jumps to a chain not ours
// that reaches one.
func reachesVia(chains map[string][]string, line string, targets map[string]bool) bool {
	for _, t := range ruleTargets(line) {
		if targets[t] || len(reaches(chains, t, targets)) > 0 {
			return true
		}
	}
	return false
}
