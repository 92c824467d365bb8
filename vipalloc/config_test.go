package vipalloc

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*Config)
		field string
		want  string
	}{
		{"service not a CIDR", func(c *Config) { c.ServiceCIDR = "240.0.0.0" }, "ServiceCIDR", `"240.0.0.0": not a CIDR`},
		{"service /33", func(c *Config) { c.ServiceCIDR = "240.0.0.0/33" }, "ServiceCIDR", "not a CIDR"},
		{"service IPv6", func(c *Config) { c.ServiceCIDR = "fd00::/8" }, "ServiceCIDR", "not an IPv4 prefix"},
		{"external IPv6", func(c *Config) { c.ExternalCIDR = "::/0" }, "ExternalCIDR", "not an IPv4 prefix"},
		{"v6 too long", func(c *Config) { c.IPv6Prefix = "fd00::/100" }, "IPv6Prefix", "/100 is longer than /96"},
		{"v6 is IPv4", func(c *Config) { c.IPv6Prefix = "10.0.0.0/8" }, "IPv6Prefix", "not an IPv6 prefix"},
		{"v6 garbage", func(c *Config) { c.IPv6Prefix = "nope" }, "IPv6Prefix", `"nope": not a CIDR`},
		{"v6 everything", func(c *Config) { c.IPv6Prefix = "::/0" }, "IPv6Prefix", "unique local prefix, inside fc00::/7"},
		{"v6 not local", func(c *Config) { c.IPv6Prefix = "2001:db8::/64" }, "IPv6Prefix", "unique local prefix"},
		{"v6 wider than local", func(c *Config) { c.IPv6Prefix = "fc00::/6" }, "IPv6Prefix", "unique local prefix"},
		{"service inside external", func(c *Config) { c.ServiceCIDR = "242.1.0.0/16" }, "ServiceCIDR", "inside ExternalCIDR 242.0.0.0/8"},
		{"port", func(c *Config) { c.DefaultPort = 70000 }, "DefaultPort", "1-65535"},
		{"pool of one unusable address", func(c *Config) { c.ServiceCIDR = "255.255.255.255/32" }, "ServiceCIDR", "no usable address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			_, err := New(cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want a ConfigError on %s containing %q", err, tc.field, tc.want)
			}
		})
	}
}

func TestPools(t *testing.T) {
	s, err := DefaultConfig().validate()
	if err != nil {
		t.Fatal(err)
	}
	// 240/4 minus 242/8, minus 240.0.0.0 and 255.255.255.255.
	if want := uint64(1<<28 - 1<<24 - 2); s.service.size != want {
		t.Errorf("service pool size %d, want %d", s.service.size, want)
	}
	for _, a := range []string{"240.0.0.0", "255.255.255.255", "242.0.0.1", "242.255.255.254"} {
		if s.service.contains(v4u(netip.MustParseAddr(a))) {
			t.Errorf("service pool hands out %s", a)
		}
	}
	if s.external.contains(v4u(netip.MustParseAddr("242.0.0.0"))) || s.external.contains(v4u(netip.MustParseAddr("242.255.255.255"))) {
		t.Error("external pool hands out its network or broadcast address")
	}
	if got := s.service.at(0); u4(got).String() != "240.0.0.1" {
		t.Errorf("first usable = %s", u4(got))
	}
	if got := s.service.at(s.service.size - 1); u4(got).String() != "255.255.255.254" {
		t.Errorf("last usable = %s", u4(got))
	}
	// Twins: the IPv4 in the low 32 bits, and back.
	v6 := netip.MustParsePrefix("fd00:fd00::/64")
	tw := twin(v6, v4u(netip.MustParseAddr("241.2.3.4")))
	if tw.String() != "fd00:fd00::f102:304" {
		t.Errorf("twin = %s", tw)
	}
	if v, ok := twinOf(v6, tw); !ok || u4(v).String() != "241.2.3.4" {
		t.Errorf("twinOf = %s %v", u4(v), ok)
	}
	if _, ok := twinOf(v6, netip.MustParseAddr("fd00:fd00::1:f102:304")); ok {
		t.Error("an address with bits between the prefix and the low 32 is not a twin")
	}
	// A /96 prefix works too.
	a := newAlloc(t, func(c *Config) { c.IPv6Prefix = "fd12:3456:789a::/96" })
	tb := allocate(t, a, snap(smallMesh(), nil))
	for _, e := range tb.Available() {
		if !netip.MustParsePrefix("fd12:3456:789a::/96").Contains(e.IPv6()) {
			t.Errorf("%s twin %s outside /96", e.Hostname(), e.IPv6())
		}
	}
}

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "vips.json")
	withState := func(c *Config) { c.StateFile = state }

	a := newAlloc(t, withState)
	first := vipsOf(allocate(t, a, snap(smallMesh(), designVOs())))
	b, err := os.ReadFile(state)
	if err != nil || !bytes.Contains(b, []byte(`"version":1`)) {
		t.Fatalf("state file: %v %s", err, b)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".vips.json.tmp*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	// A restart with a different history: the state file wins over the hash.
	dps := smallMesh()[2:] // fewer services first
	again := vipsOf(allocate(t, newAlloc(t, withState), snap(dps, designVOs())))
	for h, v := range again {
		if first[h] != v {
			t.Errorf("%s: %s after restart, was %s", h, v, first[h])
		}
	}

	// Corrupt, wrong version, bad addresses: logged, ignored, never fatal.
	for _, body := range []string{`{"version":1,"vips":`, `{"version":9,"vips":{}}`,
		`{"version":1,"vips":{"web.mesh":"not-an-ip","backend.mesh":"fd00::1"}}`} {
		if err := os.WriteFile(state, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		a, err := New(Config{ServiceCIDR: DefaultServiceCIDR, DefaultServiceVIPs: true, StateFile: state,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		allocate(t, a, snap(smallMesh(), nil))
		if !strings.Contains(logs.String(), "state file") {
			t.Errorf("%s: nothing logged: %q", body, logs.String())
		}
	}
	// A remembered address outside the pool is not used.
	os.WriteFile(state, []byte(`{"version":1,"vips":{"web.mesh":"10.0.0.1"}}`), 0o600)
	tb := allocate(t, newAlloc(t, withState), snap(smallMesh(), nil))
	if e, _ := tb.Lookup("web.mesh"); e == nil || e.IPv4().String() == "10.0.0.1" {
		t.Errorf("web.mesh = %+v", e)
	}
	// An unwritable state file is logged, not fatal.
	var logs bytes.Buffer
	bad, err := New(Config{DefaultServiceVIPs: true, StateFile: filepath.Join(dir, "missing-dir", "s.json"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, bad, snap(smallMesh(), nil))
	if !strings.Contains(logs.String(), "could not write") {
		t.Errorf("write failure not logged: %q", logs.String())
	}
}

func FuzzStateFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"vips":{"web.mesh":"240.1.2.3","mes/x":"242.0.0.9"}}`))
	f.Add([]byte(`{"version":1,"vips":{"a":"240.0.0.1","b":"240.0.0.1"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		state := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(state, data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{ServiceCIDR: "240.0.0.0/28", DefaultServiceVIPs: true, StateFile: state,
			Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := a.Allocate(snap(smallMesh(), designVOs()))
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, tb)
		seen := map[netip.Addr]string{}
		for _, e := range tb.Available() {
			if prev, dup := seen[e.IPv4()]; dup {
				t.Fatalf("%s and %s share %s", prev, e.Hostname(), e.IPv4())
			}
			seen[e.IPv4()] = e.Hostname()
		}
	})
}

func TestStateFileRoundTrip(t *testing.T) {
	s := &settings{stateFile: filepath.Join(t.TempDir(), "s.json"), log: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	want := map[string]uint32{"web.mesh": 0xf0010203, `mes/we"ird\name`: 0xf2000001, "mes/ünï<code>": 0xf2000002}
	if err := s.writeState(func(add func(hostName, uint32)) {
		for k, v := range want {
			add(hostName{head: k}, v)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if got := s.loadState(); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: %v, want %v", got, want)
	}
}

// The state file is streamed: writing 20,000 names (~600 KB of JSON) allocates a small
// fraction of it (the whole JSON was built in memory before), and it reads back whole.
func TestStateFileStreamed(t *testing.T) {
	s := &settings{stateFile: filepath.Join(t.TempDir(), "s.json"), log: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))}
	want := map[string]uint32{}
	for i := range 20000 {
		want[fmt.Sprintf("svc-%05d.mesh", i)] = 0xf0000000 + uint32(i) + 1
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := s.writeState(func(add func(hostName, uint32)) {
		for _, k := range keys {
			add(hostName{head: k}, want[k])
		}
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(fi.Size())/4 {
		t.Errorf("writing a %d-byte state file allocated %d bytes", fi.Size(), alloc)
	}
	if got := s.loadState(); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: %d names, want %d", len(got), len(want))
	}
}

// The first table's VIPs are in the state file when Allocate returns; a later change's are
// written off its path, within stateDelay, and at once by Flush (the agent stops).
func TestStateFileWrittenAfterChanges(t *testing.T) {
	state := filepath.Join(t.TempDir(), "vips.json")
	a := newAlloc(t, func(c *Config) { c.StateFile = state })
	has := func(name string) bool {
		b, err := os.ReadFile(state)
		return err == nil && bytes.Contains(b, []byte(`"`+name+`"`))
	}
	dps := smallMesh()
	allocate(t, a, snap(dps, nil))
	if !has("web.mesh") {
		t.Fatal("the first table's VIPs are not in the state file when Allocate returns")
	}
	dps = append(dps, dp("cache-1", svc("cache", "", "")))
	allocate(t, a, snap(dps, nil))
	if has("cache.mesh") {
		t.Fatal("the state file was written on the change's path")
	}
	deadline := time.Now().Add(stateDelay + 5*time.Second)
	for !has("cache.mesh") {
		if time.Now().After(deadline) {
			t.Fatalf("a new hostname's VIP not in the state file %v after the change", stateDelay+5*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dps = append(dps, dp("queue-1", svc("queue", "", "")))
	allocate(t, a, snap(dps, nil))
	a.Flush()
	if !has("queue.mesh") {
		t.Fatal("Flush did not write the state file")
	}
	a.mu.Lock()
	pending := a.stateTimer != nil
	a.mu.Unlock()
	if pending {
		t.Fatal("a write stayed scheduled after Flush wrote the state file")
	}
}
