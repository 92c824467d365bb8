package vipalloc

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/tagset"
)

// An entry's JSON shows its detail's fields beside the others, in the order and with the
// names the /vips endpoint has always had, and reads back to an equal entry.
func TestEntryJSON(t *testing.T) {
	sel := tagset.FromPairs("kuma.io/service", "*")
	e := NewEntry(EntryData{Hostname: "web.mesh", IPv4: netip.MustParseAddr("240.0.0.1"), IPv6: netip.MustParseAddr("fd00::1"),
		Ports: []uint32{80, 8080}, Origin: Origin{Kind: "VirtualOutbound", Name: "vo"}, Key: "vo{kuma.io/service=web}",
		Tags: tagset.FromPairs("kuma.io/service", "web"), Status: NotAvailable,
		Reason: "pool full", MeshExternalService: "ext", Selector: sel,
		Targets: []Target{{Port: 80, Origin: Origin{Kind: "VirtualOutbound", Name: "vo"}, Key: "k"}}})
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"hostname":"web.mesh","ipv4":"240.0.0.1","ipv6":"fd00::1","ports":[80,8080],` +
		`"origin":{"kind":"VirtualOutbound","name":"vo"},"key":"vo{kuma.io/service=web}","tags":{"kuma.io/service":"web"},` +
		`"status":"NotAvailable","reason":"pool full","meshExternalService":"ext","selector":{"kuma.io/service":"*"},` +
		`"targets":[{"port":80,"origin":{"kind":"VirtualOutbound","name":"vo"},"key":"k","tags":null}]}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Reason() != "pool full" || back.MeshExternalService() != "ext" || !back.Selector().Equal(sel) ||
		len(back.Targets()) != 1 || back.Status != NotAvailable || back.Hostname() != e.Hostname() {
		t.Errorf("read back %+v", back.Data())
	}

	plain := Entry{hostname: "a.mesh", Status: Available}
	b, _ = json.Marshal(&plain)
	if strings.Contains(string(b), "reason") || !strings.Contains(string(b), `"status":"Available"`) {
		t.Errorf("an entry without detail: %s", b)
	}
	if plain.Reason() != "" || plain.Targets() != nil || plain.Selector() != nil || plain.MeshExternalService() != "" {
		t.Error("an entry without detail has detail")
	}
}

// Setting a reason on an entry whose detail is shared (a selector's candidates share one)
// copies the detail: the others keep theirs.
func TestSetReasonNeverWritesASharedDetail(t *testing.T) {
	vo := Origin{Kind: "VirtualOutbound", Name: "vo"}
	shared := &entryDetail{origin: vo, selector: tagset.FromPairs("kuma.io/service", "*")}
	a, b := Entry{detail: shared}, Entry{detail: shared}
	a.setReason("lost")
	if a.Reason() != "lost" || b.Reason() != "" || shared.reason != "" || !a.Selector().Equal(shared.selector) ||
		a.Origin() != vo {
		t.Errorf("a %+v, b %+v, shared %+v", a.Data(), b.Data(), *shared)
	}
	a.setReason("")
	if a.detail == nil || a.Reason() != "" || a.Origin() != vo {
		t.Errorf("clearing the reason lost the selector or the origin: %+v", a.Data())
	}
}

func TestStatusText(t *testing.T) {
	for _, s := range []Status{Available, NotAvailable} {
		b, _ := s.MarshalText()
		var back Status
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v: %s read back as %v (%v)", s, b, back, err)
		}
	}
	var s Status
	if err := s.UnmarshalText([]byte("Maybe")); err == nil {
		t.Error("an unknown status read without an error")
	}
}

// The entry of a hostname is 40 bytes and its candidate fits the 48-byte size class (56 and
// 64 with the tags a slice and the published mark a field of their own; 72 and 80 with a key
// field most entries leave empty, 176 and 192 with the addresses, ports, origin and source
// spelled out in every one): one byte more and a candidate takes 64 bytes, 1.6 MB at 100,000
// names.
func TestEntrySizes(t *testing.T) {
	if got := sizeofEntry(); got > 40 {
		t.Errorf("Entry is %d bytes, want <= 40", got)
	}
	if got := sizeofCandidate(); got > 48 {
		t.Errorf("candidate is %d bytes, want <= 48", got)
	}
	// A hostname's state is 16 bytes (24 with its candidate and its lists in two pointers,
	// 32 with its entry apart from its candidate's, 64 plus its candidate list's 8 before
	// that).
	if got := sizeofHostState(); got > 16 {
		t.Errorf("hostState is %d bytes, want <= 16", got)
	}
}

// An entry's tags are a pointer to the first and, unless there is one, their count in its
// detail: none (nil), an empty set, one and several all read back as they were built, in
// Data and through JSON, and setting them never writes a detail other entries share.
func TestEntryTagCounts(t *testing.T) {
	for _, tags := range []mesh.Tags{nil, {}, tagset.FromPairs("kuma.io/service", "web"),
		tagset.FromPairs("kuma.io/service", "web", "kuma.io/zone", "z1", "version", "v1")} {
		e := NewEntry(EntryData{Hostname: "web.mesh", Tags: tags, Origin: Origin{Kind: OriginService, Name: "web"}})
		if got := e.Data().Tags; !reflect.DeepEqual(got, tags) {
			t.Errorf("built with %#v, shows %#v", tags, got)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Entry
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Tags(), tags) || back.Origin() != e.Origin() {
			t.Errorf("%s read back with tags %#v origin %v", b, back.Tags(), back.Origin())
		}
		// A reason copies the detail, the count with it.
		e.setReason("lost")
		if !reflect.DeepEqual(e.Tags(), tags) {
			t.Errorf("with a reason, %#v shows %#v", tags, e.Tags())
		}
	}
	shared := &entryDetail{origin: Origin{Kind: "VirtualOutbound", Name: "vo"}, ntags: 2}
	two := tagset.FromPairs("kuma.io/service", "web", "version", "v1")
	a, b := Entry{detail: shared}, Entry{detail: shared}
	a.setTags(two)
	b.setTags(two[:1])
	if a.detail != shared || b.detail != shared || !reflect.DeepEqual(a.Tags(), two) || !reflect.DeepEqual(b.Tags(), two[:1]) {
		t.Errorf("a shows %v, b %v", a.Tags(), b.Tags())
	}
	b.setTags(append(two, mesh.Tag{Key: "zone", Value: "z"}))
	if b.detail == shared || shared.ntags != 2 || len(b.Tags()) != 3 || len(a.Tags()) != 2 || b.Origin() != shared.origin {
		t.Errorf("three tags: b shows %v (origin %v), a %v, the shared count is %d", b.Tags(), b.Origin(), a.Tags(), shared.ntags)
	}
}

// An allocator's entry keeps its IPv6 VIP as the twin prefix in the detail its entries
// share, a single port inline and a default name's origin as its tags: all read back as they
// were built.
func TestEntryCompactFields(t *testing.T) {
	v6 := netip.MustParsePrefix("fd00:fd00::/64")
	shared := &entryDetail{twin: &v6}
	e := Entry{hostname: "web.mesh", flags: svcOrigin, detail: shared}
	e.setTags(tagset.FromPairs("kuma.io/service", "web"))
	e.setPort(8080)
	e.setVIP(0xf0000001, true)
	if e.IPv4() != netip.MustParseAddr("240.0.0.1") || e.IPv6() != netip.MustParseAddr("fd00:fd00::f000:1") ||
		len(e.Ports()) != 1 || e.Ports()[0] != 8080 || e.Origin() != (Origin{Kind: OriginService, Name: "web"}) ||
		e.detail != shared {
		t.Errorf("got %+v", e.Data())
	}
	if !e.sameVIP(0xf0000001, true) || e.sameVIP(0xf0000002, true) || e.sameVIP(0, false) {
		t.Error("sameVIP")
	}
	// A reason copies the shared detail, twin included.
	e.setReason("lost")
	if e.detail == shared || e.IPv6() != netip.MustParseAddr("fd00:fd00::f000:1") || shared.reason != "" ||
		e.Origin() != (Origin{Kind: OriginService, Name: "web"}) {
		t.Errorf("with a reason: %+v", e.Data())
	}
	e.setVIP(0, false)
	if e.IPv4().IsValid() || e.IPv6().IsValid() {
		t.Errorf("no VIP shows %s and %s", e.IPv4(), e.IPv6())
	}
	// A default name's key is derived from its tags, and compared without being built.
	e.flags |= svcKey
	if e.Key() != "Service{kuma.io/service=web}" || string(e.appendKey([]byte("x"))) != "xService{kuma.io/service=web}" ||
		!keyIs(&e, "Service{kuma.io/service=web}") || !keyIs(&e, []byte("Service{kuma.io/service=web}")) ||
		keyIs(&e, "Service{kuma.io/service=web2}") || keyIs(&e, "Service{kuma.io/service=we}") ||
		keyIs(&e, "Service{kuma.io/service=web]") || keyIs(&e, "Servicf{kuma.io/service=web}") {
		t.Errorf("derived key %q", e.Key())
	}
	// A port past 65535 (or several) and an origin that is not the tags' are kept in the detail.
	big := NewEntry(EntryData{Hostname: "x.mesh", Ports: []uint32{70000}, Origin: Origin{Kind: OriginService, Name: "other"},
		Tags: tagset.FromPairs("kuma.io/service", "web")})
	if big.Ports()[0] != 70000 || big.Origin().Name != "other" {
		t.Errorf("got %+v", big.Data())
	}
}

// A hostname's state holds one candidate, and as its one entry that candidate's own, in
// itself; it moves them to its lists when a second candidate or another entry comes, and
// back when it has one candidate showing its own entry again; either way it reads the same.
func TestHostStateLists(t *testing.T) {
	c1, c2 := &candidate{Entry: Entry{hostname: "h.mesh"}}, &candidate{Entry: Entry{hostname: "h.mesh", Status: Available}}
	e1, e2 := NewEntry(EntryData{Key: "a"}), NewEntry(EntryData{Key: "b", Status: Available})
	own1, own2 := &c1.Entry, &c2.Entry
	hs := newHostState(c1)
	hs.setEntries([]*Entry{own1})
	if hs.many() != nil || hs.name() != "h.mesh" || len(hs.cands()) != 1 || hs.cands()[0] != c1 || !stateShows(hs, own1) || hs.avail() != nil {
		t.Fatalf("one candidate: %+v", hs)
	}
	hs.addCand(c2)
	if hs.many() == nil || hs.name() != "h.mesh" || len(hs.cands()) != 2 || hs.cands()[1] != c2 || !stateShows(hs, own1) {
		t.Fatalf("two candidates: %+v", hs)
	}
	hs.setEntries([]*Entry{e1, e2})
	hs.removeCand(c1)
	if len(hs.cands()) != 1 || hs.cands()[0] != c2 || hs.avail() != e2 || !stateShows(hs, e1, e2) {
		t.Fatalf("after a removal: %+v", hs)
	}
	hs.setEntries([]*Entry{own2})
	if hs.many() != nil || len(hs.cands()) != 1 || hs.cands()[0] != c2 || hs.avail() != own2 || !stateShows(hs, own2) {
		t.Fatalf("one candidate showing its own entry again: %+v (lists %v)", hs, hs.many() != nil)
	}
	hs.removeCand(c2)
	hs.setEntries(nil)
	if len(hs.cands()) != 0 || !stateShows(hs) || hs.name() != "h.mesh" {
		t.Fatalf("empty: %+v", hs)
	}
	one := newHostState(c1)
	one.setEntries([]*Entry{e1, e2})
	if one.cands()[0] != c1 || !stateShows(one, e1, e2) || one.avail() != e2 {
		t.Fatalf("one candidate, two entries: %+v", one)
	}
	one.removeCand(c1)
	if len(one.cands()) != 0 || one.name() != "h.mesh" {
		t.Fatalf("removed: %+v", one)
	}
	copied := newHostState(c1)
	copied.setEntries([]*Entry{e1}) // not its candidate's own: in the lists
	if copied.many() == nil || !stateShows(copied, e1) || copied.cands()[0] != c1 {
		t.Fatalf("one candidate, another entry: %+v", copied)
	}
	single := newHostState(c1)
	single.removeCand(c1)
	if len(single.cands()) != 0 || single.name() != "h.mesh" {
		t.Fatalf("its only candidate removed: %+v", single)
	}
	single.addCand(c2)
	if len(single.cands()) != 1 || single.cands()[0] != c2 || single.many() != nil {
		t.Fatalf("another candidate: %+v", single)
	}
	shown := newHostState(c1)
	shown.setEntries([]*Entry{own1})
	shown.removeCand(c1)
	shown.addCand(c2) // the removed candidate's entry is still shown until the next settle
	if len(shown.cands()) != 1 || shown.cands()[0] != c2 || !stateShows(shown, own1) {
		t.Fatalf("a candidate replacing one whose entry is shown: %+v", shown)
	}
}

// stateShows reports whether hs's entries are want.
func stateShows(hs *hostState, want ...*Entry) bool {
	if hs.numEntries() != len(want) {
		return false
	}
	for i, e := range want {
		if hs.entry(i) != e {
			return false
		}
	}
	return true
}

// Keys sort the same built or derived.
func TestKeyLess(t *testing.T) {
	svc := func(s string) *Entry {
		e := &Entry{flags: svcKey}
		e.setTags(tagset.FromPairs("kuma.io/service", s))
		return e
	}
	stored := func(k string) *Entry { return NewEntry(EntryData{Key: k}) }
	keys := []*Entry{stored("A{}"), svc("a"), svc("b"), stored("Service{kuma.io/service=a,version=v1}"), stored("vo{}")}
	for i, a := range keys {
		for j, b := range keys {
			if got, want := keyLess(a, b), a.Key() < b.Key(); got != want {
				t.Errorf("keyLess(%s, %s) = %v, want %v (%d, %d)", a.Key(), b.Key(), got, want, i, j)
			}
		}
	}
}

// A policy tuple's key that spells its tags is derived from them and the origin's name.
func TestPolicyKeyDerived(t *testing.T) {
	d := &entryDetail{origin: Origin{Kind: "VirtualOutbound", Name: "vo"}}
	e := &Entry{detail: d, flags: policyKey}
	e.setTags(tagset.FromPairs("kuma.io/service", "web", "version", "v1"))
	if e.detail == d || d.ntags != 0 {
		t.Error("setTags wrote a count of tags into a detail it does not own")
	}
	const want = "vo{kuma.io/service=web,version=v1}"
	if e.Key() != want || !keyIs(e, want) || !keyIs(e, []byte(want)) || keyIs(e, want[:len(want)-1]) ||
		keyIs(e, "vo{kuma.io/service=web,version=v2}") {
		t.Errorf("key %q", e.Key())
	}
	stored := NewEntry(EntryData{Key: "vo{kuma.io/service=web,version=v0}"})
	if !keyLess(stored, e) || keyLess(e, stored) {
		t.Error("keyLess between a stored and a derived key")
	}
}

// hasUpper agrees with a byte-by-byte test on every byte value at every position.
func TestHasUpper(t *testing.T) {
	naive := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] >= 'A' && s[i] <= 'Z' {
				return true
			}
		}
		return false
	}
	for n := 0; n <= 19; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				if got, want := hasUpper(string(b)), naive(string(b)); got != want {
					t.Fatalf("hasUpper(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	for _, s := range []string{"", "svc-4242.mesh.svc.cluster.local", "\xff\xff\xff\xff\xff\xff\xff\xff", "@[`{@[`{"} {
		if hasUpper(s) {
			t.Errorf("hasUpper(%q)", s)
		}
	}
}

// TestDefaultNameKeepsNoHostname: the default name of a lower-case service keeps no string
// of its hostname (it is its tag's string and ".mesh"), yet reads, finds, sorts and spells
// out as one; an upper-case service's keeps its lowered hostname.
func TestDefaultNameKeepsNoHostname(t *testing.T) {
	a := newAlloc(t, nil)
	tb := allocate(t, a, snap([]*mesh.Dataplane{
		dp("web-1", svc("web", "v1", "zone-1")),
		dp("web2-1", svc("web2", "", "")),
		dp("we-1", svc("we", "", "")),
		dp("big-1", svc("Backend", "", "")),
	}, []*mesh.VirtualOutbound{
		vo("by-zone", "{{service}}.{{zone}}.mesh", "80", map[string]string{mesh.ServiceTag: "service", mesh.ZoneTag: "zone"},
			mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
		vo("webz", "web.mesh-z", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})),
	}))
	for _, host := range []string{"web.mesh", "web2.mesh", "we.mesh"} {
		e, ok := tb.Lookup(host)
		if !ok {
			t.Fatalf("%s: missing", host)
		}
		svc := e.Tags()[0].Value
		if e.hostname != svc || unsafe.StringData(e.hostname) != unsafe.StringData(svc) || e.flags&svcHost == 0 {
			t.Errorf("%s: the entry keeps the string %q, not its tag's %q (flags %08b)", host, e.hostname, svc, e.flags)
		}
		if e.Hostname() != host || e.Data().Hostname != host || string(e.AppendHostname([]byte("x"))) != "x"+host {
			t.Errorf("%s: Hostname %q, Data %q", host, e.Hostname(), e.Data().Hostname)
		}
		if js, _ := json.Marshal(e); !strings.Contains(string(js), `"hostname":"`+host+`"`) {
			t.Errorf("%s: JSON %s", host, js)
		}
		if n := testing.AllocsPerRun(100, func() { tb.Lookup(host) }); n != 0 {
			t.Errorf("Lookup(%s): %v allocations", host, n)
		}
		var w strings.Builder
		if !tb.Explain(&w, host) {
			t.Errorf("Explain(%s): nothing", host)
		}
	}
	for _, miss := range []string{"web.mesx", "wel.mesh", "web.mesh.", "web2.mes", "eb.mesh", "web.mesh-", "webb.mesh"} {
		if e, ok := tb.Lookup(miss + "."); ok {
			t.Errorf("Lookup(%s) = %s", miss, e.Hostname())
		}
	}
	// An upper-case service's name is lowered: its entry keeps that string.
	e, ok := tb.Lookup("backend.mesh")
	if !ok || e.hostname != "backend.mesh" || e.flags&svcHost != 0 || e.Hostname() != "backend.mesh" {
		t.Fatalf("backend.mesh: %v %v", e, ok)
	}
	if e, ok := tb.Lookup("Backend.mesh"); !ok || e.Hostname() != "backend.mesh" {
		t.Errorf("Backend.mesh: %v %v", e, ok)
	}
	// Entries sort by hostname, whether derived or kept.
	var names []string
	for _, e := range tb.Entries() {
		names = append(names, e.Hostname())
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "web.mesh-z") || !slices.Contains(names, "web.zone-1.mesh") {
		t.Errorf("entries: %v", names)
	}
}

// TestHostNameParts: a two-part hostname compares, hashes and matches as the whole does.
func TestHostNameParts(t *testing.T) {
	names := []string{"", "a", "a.mesh", "a.mesh-z", "a.mesh.x", "a.mes", "ab.mesh", "a-.mesh", "b.mesh", "a.meshz", "svc-1.mesh", "svc-12.mesh", "svc-1.mesi"}
	split := func(s string) []hostName {
		out := []hostName{{head: s}}
		if h, ok := strings.CutSuffix(s, meshSuffix); ok {
			out = append(out, hostName{head: h, tail: meshSuffix})
		}
		return out
	}
	for _, x := range names {
		for _, n := range split(x) {
			if n.String() != x || n.len() != len(x) || n.hash() != hostHash(x) || string(n.appendTo(nil)) != x {
				t.Errorf("%q as %q+%q: %q, len %d", x, n.head, n.tail, n.String(), n.len())
			}
			if prefix8(n, 0) != prefix8(hostName{head: x}, 0) || prefix8(n, 8) != prefix8(hostName{head: x}, 8) {
				t.Errorf("%q as %q+%q: prefixes differ", x, n.head, n.tail)
			}
			for _, y := range names {
				for _, m := range split(y) {
					if got, want := n.compare(m), strings.Compare(x, y); got != want {
						t.Errorf("compare(%q+%q, %q+%q) = %d, want %d", n.head, n.tail, m.head, m.tail, got, want)
					}
					if n.equal(m) != (x == y) || nameIs(n, y) != (x == y) || nameIs(n, []byte(y)) != (x == y) {
						t.Errorf("%q+%q is %q+%q: wrong", n.head, n.tail, m.head, m.tail)
					}
				}
			}
		}
	}
}

// TestDefaultNamesGetVIPsUnbuilt: giving default names their VIPs builds none of their
// hostnames (their bytes go to a reused buffer): far fewer allocations than names.
func TestDefaultNamesGetVIPsUnbuilt(t *testing.T) {
	const n = 1000
	a := newAlloc(t, nil)
	hss := make([]*hostState, n)
	for i := range hss {
		c := &candidate{}
		c.tags = &mesh.Tag{Key: mesh.ServiceTag, Value: fmt.Sprintf("svc-%d", i)}
		c.setServiceHost(c.tags.Value)
		hss[i] = newHostState(c)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a.allocateHosts(hss)
	runtime.ReadMemStats(&after)
	if mallocs := after.Mallocs - before.Mallocs; mallocs > n/10 {
		t.Errorf("%d allocations for %d names", mallocs, n)
	}
	seen := map[uint32]bool{}
	for _, hs := range hss {
		if !hs.hasVIP || seen[hs.vip] {
			t.Fatalf("%s: VIP %s %v (or taken twice)", hs.name(), u4(hs.vip), hs.hasVIP)
		}
		seen[hs.vip] = true
	}
}

// TestStateFileOfDefaultNames: the state file spells default names whole, builds none of
// them (far fewer allocations than names), and reads back to their VIPs.
func TestStateFileOfDefaultNames(t *testing.T) {
	const n = 2000
	state := filepath.Join(t.TempDir(), "vips.json")
	a := newAlloc(t, func(c *Config) { c.StateFile = state })
	dps := make([]*mesh.Dataplane, n)
	for i := range dps {
		dps[i] = dp(fmt.Sprintf("dp-%05d", i), svc(fmt.Sprintf("svc-%d", i), "", ""))
	}
	tb := allocate(t, a, snap(dps, nil))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a.writeStateLocked()
	runtime.ReadMemStats(&after)
	if mallocs := after.Mallocs - before.Mallocs; mallocs > n/10 {
		t.Errorf("%d allocations writing %d names", mallocs, n)
	}
	got := a.s.loadState()
	if len(got) != n {
		t.Fatalf("state file: %d names, want %d", len(got), n)
	}
	for _, e := range tb.Entries() {
		if v, ok := got[e.Hostname()]; !ok || u4(v) != e.IPv4() {
			t.Fatalf("state file: %s = %s, want %s", e.Hostname(), u4(v), e.IPv4())
		}
	}
	// A name that needs escaping, in two parts or one.
	for _, k := range []hostName{{head: `a"b<`, tail: meshSuffix}, {head: `a"b<.mesh`}} {
		b, _ := json.Marshal(k.String())
		if got := appendJSONName(nil, k); string(got) != string(b) {
			t.Errorf("%q+%q: %s, want %s", k.head, k.tail, got, b)
		}
	}
}
