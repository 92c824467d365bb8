package tproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// Install installs the transparent proxy: per family, one `iptables-restore --noflush`
// transaction; then makes the VIP ranges routable. When rules of ours are already there
// (a restart, a crash, another config) it reconciles them in that same transaction instead
// of stacking a second copy; when they already match, it changes nothing.
func Install(ctx context.Context, c Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.checkNetNS(); err != nil {
		return err
	}
	unlock, err := lock(ctx, c)
	if err != nil {
		return err
	}
	defer unlock()
	c = withAvailableFamilies(c, log)
	b, err := chooseBackend(ctx, c)
	if err != nil {
		return err
	}
	saves, err := refuseHeldChains(ctx, c, b)
	if err != nil {
		return err
	}
	if err := removeFromOtherBackend(ctx, c, b, log); err != nil {
		return err
	}
	logInterfaces(c, log)
	if err := installFamilies(ctx, c, b, saves, log); err != nil {
		return err
	}
	for _, f := range c.Families() {
		warnForeignRedirects(log, f, b, saves[f])
	}
	if err := removeOtherFamilies(ctx, c, b, log); err != nil {
		return err
	}
	if _, err := ensureNet(c, log); err != nil {
		return err
	}
	return nil
}

// logInterfaces says which interfaces the rules will meet, and warns of a loopback that is
// down (every redirected connection goes to it).
func logInterfaces(c Config, log *slog.Logger) {
	ifs, err := Interfaces(c)
	if err != nil {
		log.Warn("cannot list interfaces", "error", err)
		return
	}
	for _, i := range ifs {
		log.Info("interface", "name", i.Name, "index", i.Index, "up", i.Up, "addresses", fmt.Sprint(i.Addrs))
	}
	if loopbackDown(ifs) {
		log.Warn("the loopback is down: every redirected connection goes to it and is unreachable; `ip link set lo up`")
	}
}

// familyBefore is a family an install changed, with our part of it as it was.
type familyBefore struct {
	f      Family
	before []table
}

// installFamilies installs or reconciles each family in turn, all or nothing: when one
// family's transaction fails, the families installed before it go back as they were.
// saves holds each family's rules as read under the lock.
func installFamilies(ctx context.Context, c Config, b backend, saves map[Family]string, log *slog.Logger) error {
	var changed []familyBefore
	for _, f := range c.Families() {
		input, live, want, err := familyInput(c, f, b, saves[f], log)
		if err != nil {
			return err
		}
		if input == "" {
			continue
		}
		start := time.Now()
		if err := b.restore(ctx, c, f, input); err != nil {
			err = rollback(ctx, c, b, f, live, fmt.Errorf("install %s rules: %w", f, err))
			if f == IPv6 {
				err = fmt.Errorf("%w\nif this kernel lacks IPv6 NAT (ip6table_nat, nft_chain_nat), IPv6 traffic cannot be redirected: "+
					"--ip-family-mode ipv4 installs IPv4 only, on purpose (IPv6 traffic then bypasses the proxy); "+
					"if it lacks the IPv6 raw table (ip6table_raw), --skip-dns-conntrack-zone-split does without it", err)
			}
			for _, d := range changed {
				err = rollback(ctx, c, b, d.f, d.before, err)
			}
			return err
		}
		changed = append(changed, familyBefore{f, live})
		log.Info("transparent proxy installed", "family", f, "backend", b.name,
			"rules", countRules(want), "duration", time.Since(start))
	}
	return nil
}

// familyInput is the iptables-restore input that brings family f to the wanted rules (want)
// from save (the family's rules now), with our part of save as it is (live); the input is
// empty when nothing needs to change (ours already match and nothing was put ahead of our
// jumps).
func familyInput(c Config, f Family, b backend, save string, log *slog.Logger) (input string, live, want []table, err error) {
	rs, err := buildRules(c, f)
	if err != nil {
		return "", nil, nil, err
	}
	want = rs.tables
	live = parseOurs(save)
	ahead := aheadOfOurs(save)
	if slices.Equal(view(rs.tables), view(live)) && len(ahead) == 0 {
		log.Info("transparent proxy already installed", "family", f, "backend", b.name)
		return "", live, want, nil
	}
	for _, r := range ahead {
		log.Info("a rule not ours was put ahead of our jumps: putting ours back on top", "family", f, "backend", b.name, "rule", r)
	}
	if len(live) == 0 {
		input, _ = Rules(c, f)
		return input, live, want, nil
	}
	kept := foreignJumps(save, "nat")
	log.Info("reconciling rules left by an earlier install", "family", f, "backend", b.name)
	warnKept(log, f, b, live, want, kept)
	return reconcileInput(f, live, want, kept), live, want, nil
}

// warnForeignRedirects warns of rules not ours that redirect what ours leave alone.
func warnForeignRedirects(log *slog.Logger, f Family, b backend, save string) {
	for _, r := range foreignRedirects(save) {
		log.Warn("a rule not ours redirects what ours leave alone (the agent's and Envoy's own connections, excluded ports): "+
			"if it is another transparent proxy's leftover (Istio's), Envoy loops into itself: delete it", "family", f, "backend", b.name, "rule", r)
	}
}

// rollback follows a failed restore of family f: iptables-restore commits table by table,
// so the tables before the failing one may be live. It puts our part of the family back as
// it was (before), then says exactly what is live: nothing changed, or what is left.
func rollback(ctx context.Context, c Config, b backend, f Family, before []table, cause error) error {
	save, now := readLive(ctx, c, b, f)
	if slices.Equal(view(before), view(now)) {
		return fmt.Errorf("%w\nnothing of %s was changed (the live rules are as before)", cause, f)
	}
	kept := foreignJumps(save, "nat")
	var input string
	if len(before) == 0 {
		input = removeInputKeeping(now, kept)
	} else {
		input = reconcileInput(f, now, before, kept)
	}
	rerr := b.restore(ctx, c, f, input)
	after := liveOurs(ctx, c, b, f)
	if rerr == nil && slices.Equal(view(before), view(after)) {
		return fmt.Errorf("%w\nthe %s rules committed before the failure were rolled back: nothing of %s is changed", cause, f, f)
	}
	if rerr == nil {
		rerr = errors.New("the rules read back differ")
	}
	return fmt.Errorf("%w\nrolling back failed too (%v): live now in %s: %s; `kuma-dp tproxy uninstall` removes them",
		cause, rerr, f, describeLive(after))
}

// describeLive says how many rules and chains of ours each table holds.
func describeLive(ts []table) string {
	if len(ts) == 0 {
		return "nothing of ours"
	}
	var parts []string
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("table %s: %d rules, %d chains", t.name, len(t.rules), len(t.chains)))
	}
	return strings.Join(parts, "; ")
}

// unusedFamilies are the families the config does not install.
func unusedFamilies(c Config) []Family {
	var out []Family
	for _, f := range []Family{IPv4, IPv6} {
		if !slices.Contains(c.Families(), f) {
			out = append(out, f)
		}
	}
	return out
}

// liveOurs reads our part of the live ruleset of one family (nil when the backend's tools
// for the family are missing or nothing is loaded).
func liveOurs(ctx context.Context, c Config, b backend, f Family) []table {
	_, live := readLive(ctx, c, b, f)
	return live
}

// readLive is liveOurs with the iptables-save output it read.
func readLive(ctx context.Context, c Config, b backend, f Family) (string, []table) {
	if !b.available([]Family{f}) {
		return "", nil
	}
	save, err := b.save(ctx, c, f)
	if err != nil {
		return "", nil
	}
	return save, parseOurs(save)
}

// removeOtherFamilies removes rules of ours in a family the config no longer installs
// (dual-stack before, --ip-family-mode ipv4 now).
func removeOtherFamilies(ctx context.Context, c Config, b backend, log *slog.Logger) error {
	for _, f := range unusedFamilies(c) {
		save, live := readLive(ctx, c, b, f)
		if len(live) == 0 {
			continue
		}
		warnKept(log, f, b, live, nil, foreignJumps(save, "nat"))
		if err := b.restore(ctx, c, f, removeInputKeeping(live, foreignJumps(save, "nat"))); err != nil {
			return fmt.Errorf("remove our %s rules (not in --ip-family-mode %s): %w", f, c.IPFamilyMode, err)
		}
		log.Info("removed rules of a family no longer installed", "family", f, "backend", b.name, "rules", countRules(live))
	}
	return nil
}

// removeFromOtherBackend removes rules of ours left in the backend we are not using (an
// earlier install with another --iptables-executables): legacy and nft rules both stay
// active, so leaving them would redirect twice. It warns about nat rules of others there.
func removeFromOtherBackend(ctx context.Context, c Config, use backend, log *slog.Logger) error {
	other := otherBackend(use)
	for _, f := range []Family{IPv4, IPv6} {
		save, live := readLive(ctx, c, other, f)
		if slices.Contains(c.Families(), f) {
			warnOtherBackendNAT(log, f, other, save)
		}
		if len(live) == 0 {
			continue
		}
		warnKept(log, f, other, live, nil, foreignJumps(save, "nat"))
		if err := other.restore(ctx, c, f, removeInputKeeping(live, foreignJumps(save, "nat"))); err != nil {
			return fmt.Errorf("remove our old %s rules from iptables-%s: %w", f, other.name, err)
		}
		log.Warn("removed rules of ours from the other iptables backend", "family", f, "backend", other.name, "rules", countRules(live))
	}
	return nil
}

// withAvailableFamilies drops IPv6 from a dual-stack config when no interface has an IPv6
// address (IPv6 disabled in the kernel or the namespace): ip6tables would fail, and there is
// no IPv6 traffic to redirect.
func withAvailableFamilies(c Config, log *slog.Logger) Config {
	if c.IPFamilyMode != "dualstack" {
		return c
	}
	ifs, err := Interfaces(c)
	if err != nil {
		return c
	}
	for _, i := range ifs {
		for _, a := range i.Addrs {
			if familyOf(a.Addr()) == IPv6 {
				return c
			}
		}
	}
	log.Warn("no IPv6 address on any interface: installing IPv4 rules only")
	c.IPFamilyMode = "ipv4"
	return c
}

func countRules(ts []table) int {
	n := 0
	for _, t := range ts {
		n += len(t.rules)
	}
	return n
}

// Uninstall removes exactly what Install added: every rule carrying our comment, our chains,
// and the routes and addresses recorded in the state file; nothing of anyone else. It looks
// in both families and in every backend that holds rules of ours.
func Uninstall(ctx context.Context, c Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := c.checkNetNS(); err != nil {
		return err
	}
	unlock, err := lock(ctx, c)
	if err != nil {
		return err
	}
	defer unlock()
	backends := []backend{{name: "nft"}, {name: "legacy"}}
	if c.Executables == "legacy" || c.Executables == "nft" {
		backends = []backend{{name: c.Executables}}
	}
	found := false
	var errs []error
	for _, b := range backends {
		for _, f := range []Family{IPv4, IPv6} {
			if !b.available([]Family{f}) {
				continue
			}
			found = true
			save, err := b.save(ctx, c, f)
			if err != nil {
				continue // nothing loaded in this backend
			}
			live, held := parseSave(save)
			for _, h := range held {
				log.Warn("left in place: another installer's chain with one of our names", "family", f, "backend", b.name, "chain", h.chain, "rule", h.rule)
			}
			if len(live) == 0 {
				continue
			}
			start := time.Now()
			// One transaction per table: a table that cannot be cleaned does not keep the
			// others' rules live. A chain of ours that a rule not ours jumps to cannot be
			// deleted: it is emptied and kept, so that every rule of ours still goes.
			var failed bool
			for _, t := range live {
				kept := foreignJumps(save, t.name)
				if err := b.restore(ctx, c, f, removeInputKeeping([]table{t}, kept)); err != nil {
					errs = append(errs, fmt.Errorf("uninstall %s rules of table %s: %w", f, t.name, err))
					failed = true
					continue
				}
				for _, ch := range slices.Sorted(maps.Keys(kept)) {
					errs = append(errs, fmt.Errorf("%s table %s: chain %s is emptied but not deleted: a rule not ours jumps to it (%s); "+
						"delete that rule, then run uninstall again", f, t.name, ch, kept[ch]))
				}
			}
			if failed {
				if left := liveOurs(ctx, c, b, f); len(left) > 0 {
					errs = append(errs, fmt.Errorf("still live in %s (iptables-%s): %s", f, b.name, describeLive(left)))
				}
				continue
			}
			log.Info("transparent proxy removed", "family", f, "backend", b.name,
				"rules", countRules(live), "duration", time.Since(start))
		}
	}
	if !found {
		errs = append(errs, errNoIptables)
	}
	if err := removeNet(c, log); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Verify compares the live rules (and VIP routes) with what Install would produce. The diff
// is empty when they match; otherwise "- " lines are missing and "+ " lines unexpected.
func Verify(ctx context.Context, c Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	if err := c.checkNetNS(); err != nil {
		return "", err
	}
	c = withAvailableFamilies(c, slog.New(slog.DiscardHandler))
	b, err := chooseBackend(ctx, c)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, f := range c.Families() {
		rs, err := buildRules(c, f)
		if err != nil {
			return "", err
		}
		save, err := b.save(ctx, c, f)
		if err != nil {
			return "", err
		}
		live, held := parseSave(save)
		d := lineDiff(view(rs.tables), view(live))
		for _, h := range held {
			d += fmt.Sprintf("+ %s\n", h)
		}
		for _, r := range aheadOfOurs(save) {
			d += fmt.Sprintf("+ %s (ahead of our jumps: install puts them back on top)\n", r)
		}
		if d != "" {
			fmt.Fprintf(&out, "%s (%s):\n%s", f, b.name, d)
		}
	}
	for _, f := range unusedFamilies(c) {
		if live := liveOurs(ctx, c, b, f); len(live) > 0 {
			fmt.Fprintf(&out, "%s (%s), not in --ip-family-mode %s:\n%s", f, b.name, c.IPFamilyMode, lineDiff(nil, view(live)))
		}
	}
	// Rules of ours in the other backend act on every packet too (install removes them).
	other := otherBackend(b)
	for _, f := range []Family{IPv4, IPv6} {
		if live := liveOurs(ctx, c, other, f); len(live) > 0 {
			fmt.Fprintf(&out, "%s (%s), not the backend in use:\n%s", f, other.name, lineDiff(nil, view(live)))
		}
	}
	routes, err := VIPRoutes(c)
	if err != nil {
		return "", err
	}
	for _, r := range routes {
		if r.Covered == "" {
			fmt.Fprintf(&out, "- route: %s\n", r)
		}
	}
	if slices.Contains(c.Families(), IPv6) {
		if ok, err := hasPassthroughAddr(c); err == nil && !ok {
			out.WriteString("- address: ::6/128 on lo (IPv6 inbound passthrough)\n")
		}
	}
	return out.String(), nil
}

// loopbackDown reports whether lo is listed and down.
func loopbackDown(ifs []Interface) bool {
	return slices.ContainsFunc(ifs, func(i Interface) bool { return i.Name == "lo" && !i.Up })
}

// Backend names the iptables backend Install would use ("legacy" or "nft").
func Backend(ctx context.Context, c Config) (string, error) {
	b, err := chooseBackend(ctx, c)
	return b.name, err
}

// RemovalRules is the iptables-restore input Uninstall would apply, per backend and family
// holding rules of ours (empty when nothing of ours is installed).
func RemovalRules(ctx context.Context, c Config) (string, error) {
	if err := c.checkNetNS(); err != nil {
		return "", err
	}
	var out strings.Builder
	for _, b := range []backend{{name: "nft"}, {name: "legacy"}} {
		if (c.Executables == "legacy" || c.Executables == "nft") && c.Executables != b.name {
			continue
		}
		for _, f := range []Family{IPv4, IPv6} {
			if !b.available([]Family{f}) {
				continue
			}
			save, err := b.save(ctx, c, f)
			if err != nil {
				continue
			}
			if live := parseOurs(save); len(live) > 0 {
				fmt.Fprintf(&out, "# %s | %s --noflush\n%s", b.bin(f, "save"), b.bin(f, "restore"), removeInputKeeping(live, foreignJumps(save, "nat")))
			}
		}
	}
	return out.String(), nil
}
