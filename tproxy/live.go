package tproxy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// What is ours is known exactly, never by a name's prefix alone: rules carrying one of the
// comments we write, in the tables we use, and the chains we create in the nat table when
// they hold nothing else. A look-alike (a chain KUMA_MESH_SOMETHING_ELSE, a rule commented
// "kuma-dp/but-not-ours", any of ours in a table we never use) is someone else's and is
// never touched; so is a chain with one of our names that holds a rule we did not write
// (Kuma's kumactl names its chains the same): it is "held" by another installer.
var (
	ourTables   = map[string]bool{"raw": true, "nat": true}
	ourChains   = map[string]bool{chainInbound: true, chainInboundRedirect: true, chainOutbound: true, chainOutboundRedirect: true, chainDNS: true}
	ourComments = map[string]bool{}
)

func init() {
	for _, c := range comments {
		ourComments[CommentPrefix+c] = true
	}
}

// isOurChain reports whether chain, declared in table, has the name of one we create.
func isOurChain(table, chain string) bool { return table == "nat" && ourChains[chain] }

// isOurs reports whether an iptables-save rule line ("-A CHAIN ...") of table is one we
// added: it carries one of our comments (every rule we write does).
func isOurs(table, line string) bool {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "-A" || !ourTables[table] {
		return false
	}
	return ourComments[commentOf(line)]
}

// commentOf is the comment of an iptables-save rule line ("" when none); iptables-save
// quotes it when it has to, and only then.
func commentOf(line string) string {
	_, rest, ok := strings.Cut(line, "--comment ")
	if !ok {
		return ""
	}
	if strings.HasPrefix(rest, `"`) {
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return ""
		}
		return rest[1 : 1+end]
	}
	c, _, _ := strings.Cut(rest, " ")
	return c
}

// heldChain is a chain with one of our names that holds a rule we did not write.
type heldChain struct {
	table, chain string
	rule         string // the first rule not ours in it
}

func (h heldChain) String() string {
	return fmt.Sprintf("table %s: chain %s holds a rule kuma-dp did not add (%s)", h.table, h.chain, h.rule)
}

// parseOurs extracts our chains and rules, per table, from iptables-save output.
func parseOurs(save string) []table {
	ours, _ := parseSave(save)
	return ours
}

// parseSave extracts our chains and rules, per table, and the chains with our names that
// another installer holds (see heldChain). A rule of ours in a held chain is still ours.
func parseSave(save string) ([]table, []heldChain) {
	var out []table
	var held []heldChain
	isHeld := map[string]bool{} // table + " " + chain
	cur := -1
	for _, line := range strings.Split(save, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			out = append(out, table{name: line[1:]})
			cur = len(out) - 1
		case cur < 0:
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 && isOurChain(out[cur].name, f[0]) {
				out[cur].chains = append(out[cur].chains, f[0])
			}
		case isOurs(out[cur].name, line):
			rest := strings.TrimLeft(strings.TrimPrefix(line, "-A"), " \t")
			chain, spec, _ := strings.Cut(rest, " ")
			out[cur].rules = append(out[cur].rules, rule{chain: chain, spec: canonicalAddrs(strings.TrimSpace(spec))})
		case strings.HasPrefix(line, "-A "):
			if f := strings.Fields(line); len(f) > 1 && isOurChain(out[cur].name, f[1]) && !isHeld[out[cur].name+" "+f[1]] {
				isHeld[out[cur].name+" "+f[1]] = true
				held = append(held, heldChain{table: out[cur].name, chain: f[1], rule: line})
			}
		}
	}
	// Keep only tables holding something of ours, and only the chains no one else holds.
	kept := out[:0]
	for _, t := range out {
		t.chains = slices.DeleteFunc(t.chains, func(ch string) bool { return isHeld[t.name+" "+ch] })
		if len(t.chains) > 0 || len(t.rules) > 0 {
			kept = append(kept, t)
		}
	}
	return kept, held
}

// canonicalAddrs writes the addresses of a rule of ours (after -s and -d) as Go writes
// them: iptables prints IPv6 addresses with glibc's inet_ntop, which writes ::a00:1 as
// ::10.0.0.1, and the rule would never compare equal to the one we wrote.
func canonicalAddrs(spec string) string {
	f := strings.Split(spec, " ")
	for i := 0; i+1 < len(f); i++ {
		if f[i] != "-s" && f[i] != "-d" {
			continue
		}
		if p, err := netip.ParsePrefix(f[i+1]); err == nil {
			f[i+1] = p.Masked().String()
		}
	}
	return strings.Join(f, " ")
}

var builtinOrder = map[string]int{"PREROUTING": 0, "INPUT": 1, "FORWARD": 2, "OUTPUT": 3, "POSTROUTING": 4}

// view is a normalized listing of our part of a ruleset (tables by name, built-in chains in
// kernel order then ours by name, rules in chain order), to compare expected with live.
func view(tables []table) []string {
	ts := append([]table(nil), tables...)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	var out []string
	for _, t := range ts {
		chains := append([]string(nil), t.chains...)
		sort.Strings(chains)
		for _, ch := range chains {
			out = append(out, fmt.Sprintf("%s: :%s", t.name, ch))
		}
		byChain := map[string][]rule{}
		var names []string
		for _, r := range t.rules {
			if _, ok := byChain[r.chain]; !ok {
				names = append(names, r.chain)
			}
			byChain[r.chain] = append(byChain[r.chain], r)
		}
		sort.SliceStable(names, func(i, j int) bool { return chainLess(names[i], names[j]) })
		for _, ch := range names {
			for _, r := range byChain[ch] {
				out = append(out, t.name+": "+r.String())
			}
		}
	}
	return out
}

func chainLess(a, b string) bool {
	ia, aok := builtinOrder[a]
	ib, bok := builtinOrder[b]
	switch {
	case aok && bok:
		return ia < ib
	case aok != bok:
		return aok
	}
	return a < b
}

// lineDiff is a line diff: "- " lines are expected but missing, "+ " lines are live but
// unexpected. Empty when equal. Lines common to both ends are skipped; what differs between
// them is diffed by longest common subsequence when that table stays small (maxLCSCells),
// else by counting lines (missing in want's order, then unexpected in got's): thousands of
// excluded CIDRs must not cost lines x lines memory.
func lineDiff(want, got []string) string {
	for len(want) > 0 && len(got) > 0 && want[0] == got[0] {
		want, got = want[1:], got[1:]
	}
	for len(want) > 0 && len(got) > 0 && want[len(want)-1] == got[len(got)-1] {
		want, got = want[:len(want)-1], got[:len(got)-1]
	}
	if (len(want)+1)*(len(got)+1) > maxLCSCells {
		if d := countDiff(want, got); d != "" {
			return d
		}
		// The same lines in another order: name where the order first differs.
		return fmt.Sprintf("- %s\n+ %s\n", want[0], got[0])
	}
	n, m := len(want), len(got)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if want[i] == got[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && want[i] == got[j]:
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&b, "+ %s\n", got[j])
			j++
		default:
			fmt.Fprintf(&b, "- %s\n", want[i])
			i++
		}
	}
	return b.String()
}

// maxLCSCells bounds lineDiff's table (4 bytes a cell: 16 MB).
const maxLCSCells = 4 << 20

// countDiff is lineDiff by counting: each line of want beyond its count in got is missing,
// each line of got beyond its count in want unexpected.
func countDiff(want, got []string) string {
	count := map[string]int{}
	for _, l := range got {
		count[l]++
	}
	var b strings.Builder
	for _, l := range want {
		if count[l] > 0 {
			count[l]--
			continue
		}
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, l := range got { // what is left in count is unexpected
		if count[l] > 0 {
			count[l]--
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// removeInput is the iptables-restore input that deletes everything of ours in live.
func removeInput(live []table) string { return removeInputKeeping(live, nil) }

// removeInputKeeping is removeInput that empties the chains in kept but does not delete
// them: a rule not ours jumps to them, and the kernel refuses to delete a chain in use (the
// whole table's transaction would fail, leaving every rule of ours in it live).
func removeInputKeeping(live []table, kept map[string]string) string {
	var b strings.Builder
	for _, t := range live {
		fmt.Fprintf(&b, "*%s\n", t.name)
		writeRemoval(&b, t, nil)
		for _, ch := range t.chains {
			if _, ok := kept[ch]; !ok {
				fmt.Fprintf(&b, "-X %s\n", ch)
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// foreignJumps are the chains of ours in table tbl of an iptables-save output that a rule
// not ours jumps (-j) or goes (-g) to, each with the first such rule.
func foreignJumps(save, tbl string) map[string]string {
	out := map[string]string{}
	for cur, line := range saveRules(save) {
		if cur != tbl || isOurs(cur, line) {
			continue
		}
		for _, target := range ruleTargets(line) {
			if _, seen := out[target]; !seen && isOurChain(cur, target) {
				out[target] = line
			}
		}
	}
	return out
}

// writeRemoval deletes our rules from chains we do not own (built-in ones, a held one) and
// flushes our chains (except those in keep, which the caller redeclares, and so flushes,
// itself).
func writeRemoval(b *strings.Builder, t table, keep map[string]bool) {
	for _, r := range t.rules {
		if !slices.Contains(t.chains, r.chain) {
			fmt.Fprintf(b, "-D %s %s\n", r.chain, r.spec)
		}
	}
	for _, ch := range t.chains {
		if !keep[ch] {
			fmt.Fprintf(b, "-F %s\n", ch)
		}
	}
}

// reconcileInput is one transaction per family that turns live (our old rules, maybe from a
// crashed agent or another config) into want, without ever stacking a second copy. A chain
// of ours that want no longer has and that a rule not ours jumps to (kept, see
// foreignJumps) is emptied but not deleted: the kernel would refuse, failing the table.
func reconcileInput(family Family, live, want []table, kept map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kuma-dp transparent proxy, %s: reconcile\n", family)
	liveByName := map[string]table{}
	for _, t := range live {
		liveByName[t.name] = t
	}
	done := map[string]bool{}
	for _, t := range want {
		done[t.name] = true
		keep := map[string]bool{}
		fmt.Fprintf(&b, "*%s\n", t.name)
		for _, ch := range t.chains {
			keep[ch] = true
			fmt.Fprintf(&b, ":%s - [0:0]\n", ch) // creates, or flushes an existing one
		}
		old := liveByName[t.name]
		writeRemoval(&b, old, keep)
		writeRules(&b, t.rules)
		for _, ch := range old.chains {
			if _, inUse := kept[ch]; !keep[ch] && !inUse {
				fmt.Fprintf(&b, "-X %s\n", ch)
			}
		}
		b.WriteString("COMMIT\n")
	}
	var stale []table
	for _, t := range live {
		if !done[t.name] {
			stale = append(stale, t)
		}
	}
	b.WriteString(removeInputKeeping(stale, kept))
	return b.String()
}
