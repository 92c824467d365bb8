package vipalloc

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// manySelectors is one selector that names every service, behind n selectors that match
// nothing (other services, tags no inbound has) and n copies of the one that matches.
func manySelectors(n int) []mesh.Tags {
	var sels []mesh.Tags
	for i := range n {
		sels = append(sels, mesh.TagsOf(map[string]string{mesh.ServiceTag: fmt.Sprintf("none-%d", i), "version": "*"}))
		sels = append(sels, mesh.TagsOf(map[string]string{fmt.Sprintf("absent-%d", i): "*"}))
		// a common exact value beside a tag no inbound has: filed under the rare tag
		sels = append(sels, mesh.TagsOf(map[string]string{"version": "v1", fmt.Sprintf("absent-v-%d", i): "*"}))
	}
	sels = append(sels, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))
	for range n {
		sels = append(sels, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))
	}
	return sels
}

// A policy's selectors cost what they match, not their number times the mesh's inbounds: a
// VirtualOutbound of 50,000 selectors beside 10,000 dataplanes took 10 s to expand (0.2 s
// without it), at every start and every change of the policy.
func TestManySelectorsCostWhatTheyMatch(t *testing.T) {
	var dps []*mesh.Dataplane
	for i := range 3000 {
		dps = append(dps, dp(fmt.Sprintf("dp-%05d", i), svc(fmt.Sprintf("s%d", i), fmt.Sprintf("v%d", i%3), "")))
	}
	// The fastest of three allocations with each selector list, taken in turn so that a busy
	// machine slows both alike.
	run := func(sels []mesh.Tags) (time.Duration, *Table) {
		a := newAlloc(t, func(c *Config) { c.DefaultServiceVIPs = false })
		s := snap(dps, []*mesh.VirtualOutbound{vo("p", "{{service}}.p.mesh", "80", map[string]string{mesh.ServiceTag: "service"}, sels...)})
		start := time.Now()
		tb := allocate(t, a, s)
		return time.Since(start), tb
	}
	oneSels, manySels := manySelectors(0), manySelectors(10000)
	one, many := time.Duration(1<<62), time.Duration(1<<62)
	var want, got *Table
	for range 3 {
		d, tb := run(oneSels)
		one, want = min(one, d), tb
		d, tb = run(manySels)
		many, got = min(many, d), tb
	}
	if len(got.Entries()) != 3000 || !sameEntries(want, got) {
		t.Fatalf("40,001 selectors give %d entries, not those of the one that matches (%d)", len(got.Entries()), len(want.Entries()))
	}
	// Matching every selector against every inbound (the defect) costs ~20 ns a pair: 2.4 s
	// here on an idle machine, and more on a busy one.
	if many > 20*one+time.Second {
		t.Errorf("40,001 selectors (40,000 matching nothing or repeated) took %v, one selector %v", many, one)
	}
}

func sameEntries(a, b *Table) bool {
	ja, _ := json.Marshal(a.Entries())
	jb, _ := json.Marshal(b.Entries())
	sa, _ := json.Marshal(a.Skipped())
	sb, _ := json.Marshal(b.Skipped())
	return string(ja) == string(jb) && string(sa) == string(sb)
}

// The selector index picks the selector a scan of every selector picks: the best match
// (more tags, then more exact values), the first written among equals.
func TestSelectorIndexSameAsScan(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	keys := []string{mesh.ServiceTag, "version", mesh.ZoneTag, "team"}
	vals := []string{"a", "b", "c", "*"}
	tags := func(n int, wild bool) mesh.Tags {
		m := map[string]string{}
		for range n {
			v := vals[r.Intn(len(vals))]
			if !wild && v == "*" {
				v = "d"
			}
			m[keys[r.Intn(len(keys))]] = v
		}
		return mesh.TagsOf(m)
	}
	for round := range 20 {
		var dps []*mesh.Dataplane
		for i := range 200 {
			in := tags(1+r.Intn(4), false).With(mesh.ServiceTag, vals[r.Intn(3)])
			dps = append(dps, dp(fmt.Sprintf("dp-%03d", i), in))
		}
		var vos []*mesh.VirtualOutbound
		for p := range 3 {
			var sels []mesh.Tags
			for range 1 + r.Intn(60) {
				sels = append(sels, tags(1+r.Intn(3), true))
			}
			vos = append(vos, vo(fmt.Sprintf("p%d", p), "{{service}}.{{v}}.p.mesh", "80",
				map[string]string{mesh.ServiceTag: "service", "version": "v"}, sels...))
		}
		s := snap(dps, vos)
		old := selIndexMin
		selIndexMin = 1 << 30
		scan := allocate(t, newAlloc(t, nil), s)
		selIndexMin = 0
		indexed := allocate(t, newAlloc(t, nil), s)
		selIndexMin = old
		if !sameEntries(scan, indexed) {
			t.Fatalf("round %d: the index and the scan pick different selectors", round)
		}
	}
}
