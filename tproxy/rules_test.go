package tproxy

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// everyFlag sets every option away from its default.
func everyFlag() Config {
	c := DefaultConfig()
	c.RedirectOutboundPort = 16001
	c.RedirectInboundPort = 16006
	c.RedirectDNSPort = 16053
	c.KumaDPUser = "4242"
	c.ExcludeInboundPorts = []uint16{22, 9901}
	c.ExcludeOutboundPorts = []uint16{25, 3306}
	c.ExcludeOutboundIPs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd12::/16")}
	c.ExcludeOutboundPortsForUIDs = []string{"tcp:80,443,8000-8080:1000-1010", "udp:53:0", "*:9000:42,43"}
	c.IPFamilyMode = "dualstack"
	c.Executables = "nft"
	c.VIPRanges = []netip.Prefix{netip.MustParsePrefix("241.0.0.0/8"), netip.MustParsePrefix("fd00:abcd::/64")}
	return c
}

func TestRulesGolden(t *testing.T) {
	noDNS := DefaultConfig()
	noDNS.RedirectDNS = false
	noZone := DefaultConfig()
	noZone.ConntrackZoneSplit = false
	cases := []struct {
		name string
		cfg  Config
	}{
		{"default", DefaultConfig()},
		{"every-flag", everyFlag()},
		{"no-dns", noDNS},
		{"no-conntrack-zone", noZone},
	}
	for _, tc := range cases {
		for _, f := range tc.cfg.Families() {
			name := tc.name + "." + f.String() + ".rules"
			t.Run(name, func(t *testing.T) {
				got, err := Rules(tc.cfg, f)
				if err != nil {
					t.Fatal(err)
				}
				testutil.Golden(t, filepath.Join("testdata", name), []byte(got))
				again, _ := Rules(tc.cfg, f)
				if again != got {
					t.Error("Rules is not deterministic")
				}
			})
		}
	}
}

func TestRulesEveryRuleTagged(t *testing.T) {
	for _, f := range []Family{IPv4, IPv6} {
		rs, err := buildRules(everyFlag(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range rs.tables {
			for _, ch := range tb.chains {
				if !isOurChain(tb.name, ch) {
					t.Errorf("%s: chain %s of table %s is not in the list of ours", f, ch, tb.name)
				}
			}
			for _, r := range tb.rules {
				if !isOurs(tb.name, r.String()) || !ourComments[commentOf(r.spec)] {
					t.Errorf("%s: rule not tagged: %s", f, r)
				}
			}
		}
	}
}

func TestIPv4ModeHasOneFamily(t *testing.T) {
	c := DefaultConfig()
	c.IPFamilyMode = "ipv4"
	if got := c.Families(); len(got) != 1 || got[0] != IPv4 {
		t.Fatalf("Families() = %v, want [ipv4]", got)
	}
	if got := vipRanges(c); len(got) != 1 || got[0].String() != "240.0.0.0/4" {
		t.Fatalf("vipRanges = %v, want only the IPv4 range", got)
	}
}
