package vipalloc

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The Speed section's mesh: 10,000 services x 3 versions x 2 zones, one dataplane per
// (service, version, zone), with the four VirtualOutbounds of the VirtualOutbound design.
func bigMesh(services int) []*mesh.Dataplane {
	dps := make([]*mesh.Dataplane, 0, services*6)
	for s := 0; s < services; s++ {
		name := fmt.Sprintf("svc-%05d", s)
		for v := 1; v <= 3; v++ {
			for z := 1; z <= 2; z++ {
				dps = append(dps, dp(fmt.Sprintf("%s-v%d-z%d", name, v, z),
					svc(name, fmt.Sprintf("v%d", v), fmt.Sprintf("zone-%d", z))))
			}
		}
	}
	sort.Slice(dps, func(i, j int) bool { return dps[i].Name < dps[j].Name })
	return dps
}

func BenchmarkAllocateFull(b *testing.B) {
	s := snap(bigMesh(10000), designVOs())
	b.ReportAllocs()
	b.ResetTimer()
	var tb *Table
	var a *Allocator
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		a = newAlloc(b, nil)
		var err error
		if tb, err = a.Allocate(s); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu0)
	if tb.Len() != 60000 {
		b.Fatalf("Len = %d, want 60000", tb.Len())
	}
	reportLiveHeap(b, func() { a, tb = nil, nil }, s)
}

// reportLiveHeap reports the heap the last allocation keeps alive (allocator + table, the
// snapshot excluded) as live-MB.
func reportLiveHeap(b *testing.B, drop func(), keep any) {
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	drop()
	runtime.GC()
	runtime.ReadMemStats(&without)
	runtime.KeepAlive(keep)
	b.ReportMetric(float64(with.HeapAlloc-without.HeapAlloc)/(1<<20), "live-MB")
}

func BenchmarkAddDataplane(b *testing.B) {
	base := bigMesh(10000)
	vos := designVOs()
	a := newAlloc(b, nil)
	first, err := a.Allocate(snap(base, vos))
	if err != nil {
		b.Fatal(err)
	}
	before := vipsOf(first)
	dps := slices.Clone(base)
	var tb *Table
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d := dp(fmt.Sprintf("added-%06d", i), svc(fmt.Sprintf("added-%06d", i), "v1", "zone-1"))
		at, _ := slices.BinarySearchFunc(dps, d.Name, func(x *mesh.Dataplane, n string) int {
			return cmpStr(x.Name, n)
		})
		dps = slices.Insert(dps, at, d)
		s := &mesh.Snapshot{Mesh: "default", Self: base[0], Dataplanes: slices.Clone(dps), VirtualOutbounds: vos}
		b.StartTimer()
		if tb, err = a.Allocate(s); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := vipsOf(tb)
	for h, v := range before {
		if after[h] != v {
			b.Fatalf("%s moved from %s to %s", h, v, after[h])
		}
	}
	if want := 60000 + 3*b.N; tb.Len() != want {
		b.Fatalf("Len = %d, want %d", tb.Len(), want)
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cpuTime is the process's user+system CPU time: with 2 cores shared by other work, CPU time
// per op is steadier than wall time, so both are reported.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime()-since)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkTableLookup100k: a name looked up in a 100,000-name table, one there (hit) and
// one not (miss: a search domain's expansion, most questions), names taken in a scattered
// order so that the index's slots are not all in cache. The table is hand-built (every
// entry holds its hostname) or, for default/, the allocator's default names of 100,000
// services (none holds one: compared piecewise).
//
//	go test ./vipalloc -run '^$' -bench TableLookup100k
func BenchmarkTableLookup100k(b *testing.B) {
	const n = 100_000
	entries := make([]*Entry, n)
	dps := make([]*mesh.Dataplane, n)
	for i := range n {
		entries[i] = NewEntry(EntryData{Hostname: fmt.Sprintf("svc-%d.mesh", i), Status: Available, Key: fmt.Sprint(i)})
		dps[i] = dp(fmt.Sprintf("dp-%06d", i), svc(fmt.Sprintf("svc-%d", i), "", ""))
	}
	hand := NewTable(entries, nil)
	defaults := allocate(b, newAlloc(b, nil), snap(dps, nil))
	for _, tc := range []struct {
		name string
		t    *Table
	}{{"hand", hand}, {"default", defaults}} {
		hits, misses := make([]string, n), make([]string, n)
		for i, e := range tc.t.Available() {
			// A question of its own, as a packet's is (not the entry's string: equal
			// pointers would skip the comparison).
			hits[i] = strings.Clone(e.Data().Hostname)
			misses[i] = hits[i] + ".default.svc.cluster.local"
		}
		for _, c := range []struct {
			name  string
			names []string
			found bool
		}{{"hit", hits, true}, {"miss", misses, false}} {
			b.Run(tc.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i = (i + 7919) % n
					if _, ok := tc.t.Lookup(c.names[i]); ok != c.found {
						b.Fatalf("Lookup(%q) = %v", c.names[i], ok)
					}
				}
			})
		}
	}
}
