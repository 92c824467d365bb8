package tproxy

import (
	"context"
	"fmt"
	"os"
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
