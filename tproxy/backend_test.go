package tproxy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeIptables puts stand-in iptables-{legacy,nft}-{save,restore} (and ip6tables) in PATH;
// save prints n rules (our comment on the first `ours` of them) or fails when n < 0.
func fakeIptables(t *testing.T, legacy, legacyOurs, nft, nftOurs int) {
	t.Helper()
	dir := t.TempDir()
	for _, fam := range []string{"iptables", "ip6tables"} {
		for name, n := range map[string][2]int{"legacy": {legacy, legacyOurs}, "nft": {nft, nftOurs}} {
			var body strings.Builder
			body.WriteString("#!/bin/sh\n")
			if n[0] < 0 {
				body.WriteString("echo 'iptables: no kernel support' >&2; exit 1\n")
			} else {
				body.WriteString("echo '*nat'\n")
				for i := range n[0] {
					if i < n[1] {
						fmt.Fprintf(&body, "echo '-A OUTPUT -p tcp -m comment --comment \"kuma-dp/outbound\" -j KUMA_MESH_OUTBOUND'\n")
					} else {
						fmt.Fprintf(&body, "echo '-A OUTPUT -d 10.0.0.%d/32 -j ACCEPT'\n", i)
					}
				}
				body.WriteString("echo COMMIT\n")
			}
			for tool, script := range map[string]string{"save": body.String(), "restore": "#!/bin/sh\ncat >/dev/null\n"} {
				path := filepath.Join(dir, fam+"-"+name+"-"+tool)
				if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Setenv("PATH", dir+":/usr/bin:/bin")
}

func TestChooseBackend(t *testing.T) {
	cases := []struct {
		name                             string
		legacy, legacyOurs, nft, nftOurs int
		want                             string
	}{
		{"empty host: nft", 0, 0, 0, 0, "nft"},
		{"host uses legacy (more rules)", 5, 0, 1, 0, "legacy"},
		{"host uses nft", 0, 0, 3, 0, "nft"},
		{"our rules win over the rule count", 9, 0, 1, 1, "nft"},
		{"our rules in legacy", 2, 2, 7, 0, "legacy"},
		{"tie, nft save fails: legacy", 0, 0, -1, 0, "legacy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fakeIptables(t, tc.legacy, tc.legacyOurs, tc.nft, tc.nftOurs)
			got, err := Backend(context.Background(), DefaultConfig())
			if err != nil || got != tc.want {
				t.Fatalf("Backend() = %q, %v; want %q", got, err, tc.want)
			}
			c := DefaultConfig()
			c.Executables = "legacy"
			if got, err := Backend(context.Background(), c); err != nil || got != "legacy" {
				t.Fatalf("forced legacy: Backend() = %q, %v", got, err)
			}
		})
	}
}

// Hosts whose iptables has no -legacy/-nft names (Amazon Linux 2, Ubuntu 18.04, images
// built with only "iptables-restore"): the plain tools are used for the backend their
// --version names ("(nf_tables)", else legacy), and install, reinstall and uninstall work
// with real iptables. Before, install failed with "no iptables found".
func TestPlainIptablesNames(t *testing.T) {
	for i, tc := range []struct{ multi, backend string }{{"xtables-legacy-multi", "legacy"}, {"xtables-nft-multi", "nft"}} {
		t.Run(tc.backend, func(t *testing.T) {
			requireNetns(t, tc.multi)
			multi, _ := exec.LookPath(tc.multi)
			ipPath, _ := exec.LookPath("ip")
			realSave, err := exec.LookPath(backend{name: tc.backend}.bin(IPv4, "save"))
			if err != nil {
				t.Skip(err)
			}
			n := newTestNS(t, 21+i)
			dir := t.TempDir()
			for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
				if err := os.Symlink(multi, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(ipPath, filepath.Join(dir, "ip")); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir)
			c := DefaultConfig()
			c.NetNS, c.StateFile = n.name, filepath.Join(t.TempDir(), "state.json")
			ctx := context.Background()
			if got, err := Backend(ctx, c); err != nil || got != tc.backend {
				t.Fatalf("Backend(auto) with plain names = %q, %v; want %q", got, err, tc.backend)
			}
			if err := Install(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			live := func() []table {
				out, err := exec.Command(ipPath, "netns", "exec", n.name, realSave).Output()
				if err != nil {
					t.Fatal(err)
				}
				return parseOurs(string(out))
			}
			if countRules(live()) == 0 {
				t.Fatalf("no rule of ours in %s after install", realSave)
			}
			if d, err := Verify(ctx, c); err != nil || strings.Contains(d, "nat:") {
				t.Fatalf("Verify = %q, %v", d, err)
			}
			if err := Uninstall(ctx, c, testLogger(t)); err != nil {
				t.Fatal(err)
			}
			if left := live(); len(left) != 0 {
				t.Fatalf("left after uninstall: %v", view(left))
			}
		})
	}
}
