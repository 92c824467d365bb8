package tproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// backend is one iptables implementation: legacy (x_tables) or nft (nf_tables).
type backend struct {
	name string // "legacy" or "nft"
}

// bin names the backend's tool for the family: e.g. ip6tables-nft-restore or, where only the
// plain names exist (Amazon Linux 2, Ubuntu 18.04, minimal images), ip6tables-restore when
// that one is this backend.
func (b backend) bin(f Family, tool string) string {
	prefix := "iptables"
	if f == IPv6 {
		prefix = "ip6tables"
	}
	named := prefix + "-" + b.name + "-" + tool
	if _, err := exec.LookPath(named); err == nil {
		return named
	}
	if plain := prefix + "-" + tool; plainBackend(prefix) == b.name {
		if _, err := exec.LookPath(plain); err == nil {
			return plain
		}
	}
	return named
}

var (
	plainMu    sync.Mutex
	plainCache = map[string]string{} // path of a plain *-save -> its backend
)

// plainBackend is the backend of the plain tools (iptables-save, without -legacy or -nft),
// from their --version: "(nf_tables)" is nft, anything else legacy (before 1.8 there was
// only legacy, and iptables-save 1.6 ignores --version). "" when there are none.
func plainBackend(prefix string) string {
	path, err := exec.LookPath(prefix + "-save")
	if err != nil {
		return ""
	}
	plainMu.Lock()
	defer plainMu.Unlock()
	if v, ok := plainCache[path]; ok {
		return v
	}
	out, _ := exec.Command(path, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	v := "legacy"
	if strings.Contains(first, "nf_tables") {
		v = "nft"
	}
	plainCache[path] = v
	return v
}

// otherBackend is the backend b is not.
func otherBackend(b backend) backend {
	if b.name == "legacy" {
		return backend{name: "nft"}
	}
	return backend{name: "legacy"}
}

// available reports whether the backend's restore and save commands exist for the families.
func (b backend) available(fams []Family) bool {
	for _, f := range fams {
		for _, tool := range []string{"restore", "save"} {
			if _, err := exec.LookPath(b.bin(f, tool)); err != nil {
				return false
			}
		}
	}
	return true
}

// errNoIptables is returned when no iptables backend is installed.
var errNoIptables = errors.New(`no iptables found (looked for iptables-legacy-restore, iptables-nft-restore and iptables-restore in PATH): install the Debian package "iptables"`)

// command runs name args, inside the config's network namespace when one is set.
func command(ctx context.Context, c Config, stdin string, name string, args ...string) (string, error) {
	if c.NetNS != "" {
		args = append([]string{"netns", "exec", c.NetNS, name}, args...)
		name = "ip"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (b backend) save(ctx context.Context, c Config, f Family) (string, error) {
	return command(ctx, c, "", b.bin(f, "save"))
}

func (b backend) restore(ctx context.Context, c Config, f Family, input string) error {
	_, err := command(ctx, c, input, b.bin(f, "restore"), "--noflush", "--wait=5")
	if err != nil {
		return fmt.Errorf("%s: %w\ninput:\n%s", f, err, input)
	}
	return nil
}

// chooseBackend honours --iptables-executables, or (auto) picks the backend the host already
// uses: the one holding our own rules, else the one with more nat rules of others (Docker's
// DNS DNAT: our jumps go ahead of it only in the same nat table; between the two backends'
// nat tables, the one the kernel registered last acts first), else the one with more rules,
// else one whose save works, nft first.
func chooseBackend(ctx context.Context, c Config) (backend, error) {
	fams := c.Families()
	switch c.Executables {
	case "legacy", "nft":
		b := backend{name: c.Executables}
		if !b.available(fams) {
			return b, fmt.Errorf("--iptables-executables=%s: %s not found in PATH: install the Debian package \"iptables\"", c.Executables, b.bin(IPv4, "restore"))
		}
		return b, nil
	}
	type score struct {
		b              backend
		ours, nat, all int
		failed         bool // a save failed: the kernel side may be missing
	}
	var scores []score
	for _, name := range []string{"nft", "legacy"} {
		b := backend{name: name}
		if !b.available(fams) {
			continue
		}
		s := score{b: b}
		for _, f := range fams {
			out, err := b.save(ctx, c, f)
			if err != nil {
				s.failed = true // e.g. no nf_tables in the kernel: nothing installed there
				continue
			}
			s.all += len(foreignRules(out, ""))
			s.nat += len(foreignRules(out, "nat"))
			for _, t := range parseOurs(out) {
				s.ours += len(t.rules)
			}
		}
		scores = append(scores, s)
	}
	if len(scores) == 0 {
		return backend{}, errNoIptables
	}
	best := scores[0]
	for _, s := range scores[1:] {
		better := s.ours > best.ours ||
			(s.ours == best.ours && s.nat > best.nat) ||
			(s.ours == best.ours && s.nat == best.nat && s.all > best.all)
		tie := s.ours == best.ours && s.nat == best.nat && s.all == best.all
		if better || (tie && best.failed && !s.failed) {
			best = s
		}
	}
	return best.b, nil
}
