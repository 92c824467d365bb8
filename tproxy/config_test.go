package tproxy

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; none means valid
	}{
		{"default", func(*Config) {}, nil},
		{"every flag", func(c *Config) { *c = everyFlag() }, nil},
		{"dns off ignores its port", func(c *Config) { c.RedirectDNS, c.RedirectDNSPort = false, 0 }, nil},
		{"outbound port 0", func(c *Config) { c.RedirectOutboundPort = 0 }, []string{"--redirect-outbound-port=0"}},
		{"dns port 0", func(c *Config) { c.RedirectDNSPort = 0 }, []string{"--redirect-dns-port=0"}},
		{"same ports", func(c *Config) { c.RedirectInboundPort = c.RedirectOutboundPort }, []string{"--redirect-inbound-port=15001", "must differ"}},
		{"empty user", func(c *Config) { c.KumaDPUser = " " }, []string{"--kuma-dp-user"}},
		{"unknown user", func(c *Config) { c.KumaDPUser = "no-such-user-kdp" }, []string{`--kuma-dp-user="no-such-user-kdp"`}},
		{"user by name", func(c *Config) { c.KumaDPUser = "root" }, nil},
		{"excluded port 0", func(c *Config) { c.ExcludeInboundPorts = []uint16{22, 0} }, []string{"--exclude-inbound-ports=0"}},
		{"excluded outbound port 0", func(c *Config) { c.ExcludeOutboundPorts = []uint16{0} }, []string{"--exclude-outbound-ports=0"}},
		{"bad prefix", func(c *Config) { c.ExcludeOutboundIPs = []netip.Prefix{{}} }, []string{"--exclude-outbound-ips"}},
		{"bad vip range", func(c *Config) { c.VIPRanges = []netip.Prefix{{}} }, []string{"--vip-ranges"}},
		{"family mode", func(c *Config) { c.IPFamilyMode = "ipv6" }, []string{`--ip-family-mode="ipv6"`}},
		{"executables", func(c *Config) { c.Executables = "iptables" }, []string{`--iptables-executables="iptables"`}},
		{"ports for uids", func(c *Config) { c.ExcludeOutboundPortsForUIDs = []string{"80"} }, []string{`--exclude-outbound-ports-for-uids="80"`}},
		{"dns port is the outbound port", func(c *Config) { c.RedirectDNSPort = c.RedirectOutboundPort }, []string{"--redirect-dns-port=15001", "must differ"}},
		{"dns port is the inbound port", func(c *Config) { c.RedirectDNSPort = c.RedirectInboundPort }, []string{"--redirect-dns-port=15006", "must differ"}},
		{"dns off: its port may be anything", func(c *Config) { c.RedirectDNS, c.RedirectDNSPort = false, c.RedirectOutboundPort }, nil},
		{"uid beyond the owner match", func(c *Config) { c.KumaDPUser = "4294967295" }, []string{`--kuma-dp-user="4294967295"`}},
		{"ipv4-mapped excluded ip", func(c *Config) { c.ExcludeOutboundIPs = []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.1/128")} }, []string{"--exclude-outbound-ips=::ffff:10.0.0.1/128", "10.0.0.1"}},
		{"ipv4-mapped vip range", func(c *Config) { c.VIPRanges = []netip.Prefix{netip.MustParsePrefix("::ffff:240.0.0.0/100")} }, []string{"--vip-ranges=::ffff:240.0.0.0/100"}},
		{"vip range of everything", func(c *Config) { c.VIPRanges = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")} }, []string{"--vip-ranges=0.0.0.0/0", "every address"}},
		{"vip range over the loopback", func(c *Config) { c.VIPRanges = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/7")} }, []string{"--vip-ranges=127.0.0.0/7", "loopback"}},
		{"ipv6 vip range over the loopback", func(c *Config) { c.VIPRanges = []netip.Prefix{netip.MustParsePrefix("::/96")} }, []string{"--vip-ranges=::/96", "loopback"}},
		{"every error at once", func(c *Config) { c.RedirectOutboundPort, c.IPFamilyMode = 0, "x" }, []string{"--redirect-outbound-port=0", "--ip-family-mode"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if _, rerr := Rules(c, IPv4); rerr == nil {
				t.Error("Rules accepted an invalid config")
			}
		})
	}
}

func TestParsePortsForUIDs(t *testing.T) {
	cases := []struct {
		in      string
		want    PortsForUIDs
		wantErr string
	}{
		{in: "80,443:1000", want: PortsForUIDs{Protocols: []string{"tcp", "udp"}, Ports: []string{"80", "443"}, UIDs: []string{"1000"}}},
		{in: "tcp:8000-8080:1000-1010,7", want: PortsForUIDs{Protocols: []string{"tcp"}, Ports: []string{"8000:8080"}, UIDs: []string{"1000-1010", "7"}}},
		{in: "UDP:*:0", want: PortsForUIDs{Protocols: []string{"udp"}, UIDs: []string{"0"}}},
		{in: "*:53:42", want: PortsForUIDs{Protocols: []string{"tcp", "udp"}, Ports: []string{"53"}, UIDs: []string{"42"}}},
		// iptables refuses the multiport range 80:80 and prints the owner range 7-7 as 7.
		{in: "tcp:80-80,90:7-7", want: PortsForUIDs{Protocols: []string{"tcp"}, Ports: []string{"80", "90"}, UIDs: []string{"7"}}},
		{in: "80:4294967295", wantErr: "uids"},
		{in: "80", wantErr: "want"},
		{in: "a:b:c:d", wantErr: "want"},
		{in: "icmp:80:1", wantErr: `protocol "icmp"`},
		{in: "0:1", wantErr: "ports"},
		{in: "70000:1", wantErr: "ports"},
		{in: "90-80:1", wantErr: "reversed"},
		{in: "80:x", wantErr: "uids"},
		{in: "80:", wantErr: "uids"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePortsForUIDs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--exclude-outbound-ports-for-uids") {
					t.Fatalf("ParsePortsForUIDs(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Protocols, tc.want.Protocols) || !slices.Equal(got.Ports, tc.want.Ports) || !slices.Equal(got.UIDs, tc.want.UIDs) {
				t.Fatalf("ParsePortsForUIDs(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestPortsForUIDsMultiportLimit(t *testing.T) {
	// 20 ranges weigh 40: iptables' multiport takes 15 per rule, so 3 rules per UID.
	var ports []string
	for i := range 20 {
		ports = append(ports, fmt.Sprintf("%d-%d", 1000+10*i, 1005+10*i))
	}
	p, err := ParsePortsForUIDs("tcp:" + strings.Join(ports, ",") + ":1,2")
	if err != nil {
		t.Fatal(err)
	}
	ms := portsForUIDsMatches("tcp", p)
	if len(ms) != 6 {
		t.Fatalf("got %d matches, want 6 (3 groups x 2 uids): %q", len(ms), ms)
	}
	for _, m := range ms {
		spec := strings.Fields(m)[5] // -p tcp -m multiport --dports SPEC
		weight := 0
		for _, s := range strings.Split(spec, ",") {
			weight++
			if strings.Contains(s, ":") {
				weight++
			}
		}
		if weight > 15 {
			t.Errorf("multiport spec %q weighs %d > 15", spec, weight)
		}
	}
}

// FuzzParsePortsForUIDs: outside input (flags, env, files) never panics, and whatever it
// accepts renders to rules that iptables-save would print back unchanged (no stray spaces,
// quotes or options).
func FuzzParsePortsForUIDs(f *testing.F) {
	for _, s := range []string{"80,443:1000", "tcp:8000-8080:1000-1010", "*:*:0", "udp:53:5678", ":", "::", "1-:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePortsForUIDs(s)
		if err != nil {
			return
		}
		for _, proto := range p.Protocols {
			for _, m := range portsForUIDsMatches(proto, p) {
				for _, field := range strings.Fields(m) {
					if strings.ContainsAny(field, "\"'\\\n\t") {
						t.Fatalf("match %q from %q has an unsafe field %q", m, s, field)
					}
				}
			}
		}
	})
}

// A --netns that names no namespace is refused by every action, naming the flag and the
// value: uninstall used to find nothing there and exit 0, leaving the namespace meant (a
// typo away) as it was; a name with a slash escaped the lock directory.
func TestUnknownNetNSIsRefused(t *testing.T) {
	for _, name := range []string{"kdp-no-such-namespace", "../../tmp/x", ".."} {
		c := DefaultConfig()
		c.NetNS, c.StateFile = name, filepath.Join(t.TempDir(), "state.json")
		want := fmt.Sprintf("--netns=%q", name)
		ctx := context.Background()
		for action, err := range map[string]error{
			"Install":   Install(ctx, c, nil),
			"Uninstall": Uninstall(ctx, c, nil),
			"Verify":    func() error { _, err := Verify(ctx, c); return err }(),
		} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s with --netns %q: %v; want an error naming %s", action, name, err, want)
			}
		}
	}
}
