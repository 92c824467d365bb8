package vipalloc

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/mesh"
)

// Allocator turns snapshots into Tables. It keeps the previous assignments (and the model it
// expanded last time), so each Allocate costs in proportion to what changed, and a hostname
// that still exists keeps its VIP. Safe for concurrent use (calls are serialized).
type Allocator struct {
	mu sync.Mutex
	s  *settings

	// sticky holds preferred VIPs (from the state file) for keys not allocated yet.
	sticky map[string]uint32

	meshName string
	dps      []*mesh.Dataplane // the last snapshot's dataplanes, sorted by name
	defaults *expander         // nil when default service names are off
	vos      map[string]*expander
	mes      *mesSource

	hosts   map[string]*hostState
	vips    map[string]uint32   // key (hostname, or "mes/<name>") -> IPv4 VIP
	pending map[string]struct{} // keys whose pool was full last time
	skips   map[string]*candidate
	skipped []Skip

	table *Table
	sum   [2]uint64
	dirty bool     // assignments changed since the state file was written
	slab  []uint32 // see ports
}

// hostState is one hostname: the candidates proposing it and the entries it has now.
type hostState struct {
	cands   []*candidate
	entries []*Entry // sorted by key
	avail   *Entry
}

// New validates cfg and reads the state file (a corrupt one is logged and ignored).
func New(cfg Config) (*Allocator, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	a := &Allocator{s: s, sticky: s.loadState(), vos: map[string]*expander{}, mes: newMESSource(),
		hosts: map[string]*hostState{}, vips: map[string]uint32{}, pending: map[string]struct{}{},
		skips: map[string]*candidate{}}
	if s.defaultVIPs {
		a.defaults = newDefaultExpander(s.defaultPort)
	}
	return a, nil
}

// round collects what one Allocate changed.
type round struct {
	a            *Allocator
	touched      map[string]struct{}
	skipsChanged bool
}

func (r *round) add(c *candidate) {
	if c.host == "" {
		r.a.skips[c.origin.Kind+"/"+c.key] = c
		r.skipsChanged = true
		return
	}
	hs := r.a.hosts[c.host]
	if hs == nil {
		hs = &hostState{}
		r.a.hosts[c.host] = hs
	}
	hs.cands = append(hs.cands, c)
	r.touched[c.host] = struct{}{}
}

func (r *round) remove(c *candidate) {
	if c.host == "" {
		delete(r.a.skips, c.origin.Kind+"/"+c.key)
		r.skipsChanged = true
		return
	}
	hs := r.a.hosts[c.host]
	if hs == nil {
		return
	}
	if i := slices.Index(hs.cands, c); i >= 0 {
		hs.cands = slices.Delete(hs.cands, i, i+1)
	}
	r.touched[c.host] = struct{}{}
}

// Allocate expands s into hostnames, allocates their VIPs and returns the new Table. Only a
// nil snapshot is an error: problems with single names are NotAvailable entries or skips.
func (a *Allocator) Allocate(s *mesh.Snapshot) (*Table, error) {
	if s == nil {
		return nil, fmt.Errorf("vipalloc: nil snapshot")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &round{a: a, touched: map[string]struct{}{}}
	if s.Mesh != a.meshName {
		a.resetModel(r)
		a.meshName = s.Mesh
	}
	a.updatePolicies(r, s)
	mesAdded, mesRemoved := a.mes.update(r, s)
	for _, n := range mesRemoved {
		a.release(mesKeyPrefix + n)
	}
	for k := range a.pending {
		if strings.HasPrefix(k, mesKeyPrefix) {
			mesAdded = append(mesAdded, strings.TrimPrefix(k, mesKeyPrefix))
		} else {
			r.touched[k] = struct{}{}
		}
	}
	t := a.resolve(r, mesAdded)
	if a.dirty && a.s.stateFile != "" {
		if err := a.s.saveState(a.vips); err != nil {
			a.s.log.Warn("vipalloc: could not write the state file", "err", err)
		} else {
			a.dirty = false
		}
	}
	return t, nil
}

// resetModel forgets the expanded model (not the VIPs, which become sticky preferences).
func (a *Allocator) resetModel(r *round) {
	for _, x := range a.vos {
		x.removeAll(r)
	}
	a.vos = map[string]*expander{}
	if a.defaults != nil {
		a.defaults.removeAll(r)
	}
	a.dps = nil
}

// updatePolicies applies the snapshot's VirtualOutbounds and dataplanes: unchanged policies
// see only the dataplanes that changed; new or changed policies expand over all of them.
func (a *Allocator) updatePolicies(r *round, s *mesh.Snapshot) {
	var fresh []*expander
	next := make(map[string]*expander, len(s.VirtualOutbounds))
	for _, vo := range s.VirtualOutbounds {
		if x := a.vos[vo.Name]; x != nil && sameVO(x.vo, vo) {
			x.vo = vo
			next[vo.Name] = x
			continue
		}
		x := newVOExpander(vo)
		next[vo.Name] = x
		fresh = append(fresh, x)
	}
	for name, x := range a.vos {
		if next[name] != x {
			x.removeAll(r)
		}
	}
	kept := make([]*expander, 0, len(next)+1)
	if a.defaults != nil {
		kept = append(kept, a.defaults)
	}
	for _, vo := range s.VirtualOutbounds {
		if x := next[vo.Name]; !slices.Contains(fresh, x) {
			kept = append(kept, x)
		}
	}
	a.vos = next

	dps := s.Dataplanes
	if !sort.SliceIsSorted(dps, func(i, j int) bool { return dps[i].Name < dps[j].Name }) {
		dps = slices.Clone(dps)
		sort.Slice(dps, func(i, j int) bool { return dps[i].Name < dps[j].Name })
	}
	visit := func(xs []*expander, dp *mesh.Dataplane, delta int32) {
		for i := range dp.Networking.Inbound {
			tags := dp.Networking.Inbound[i].Tags
			for _, x := range xs {
				x.visit(r, tags, delta)
			}
		}
	}
	old := a.dps
	i, j := 0, 0
	for i < len(old) || j < len(dps) {
		switch {
		case i < len(old) && j < len(dps) && old[i] == dps[j]:
			i++
			j++
		case j == len(dps) || i < len(old) && old[i].Name < dps[j].Name:
			visit(kept, old[i], -1)
			i++
		case i == len(old) || dps[j].Name < old[i].Name:
			visit(kept, dps[j], +1)
			j++
		default: // same name, another object
			if !sameInbounds(old[i], dps[j]) {
				visit(kept, old[i], -1)
				visit(kept, dps[j], +1)
			}
			i++
			j++
		}
	}
	for _, dp := range dps {
		visit(fresh, dp, +1)
	}
	a.dps = dps
}

func sameInbounds(a, b *mesh.Dataplane) bool {
	if len(a.Networking.Inbound) != len(b.Networking.Inbound) {
		return false
	}
	for i := range a.Networking.Inbound {
		if !maps.Equal(a.Networking.Inbound[i].Tags, b.Networking.Inbound[i].Tags) {
			return false
		}
	}
	return true
}

// release frees the VIP of key.
func (a *Allocator) release(key string) {
	delete(a.pending, key)
	v, ok := a.vips[key]
	if !ok {
		return
	}
	delete(a.vips, key)
	a.poolOf(key).release(v, key)
	a.dirty = true
}

func (a *Allocator) poolOf(key string) *pool {
	if strings.HasPrefix(key, mesKeyPrefix) {
		return a.s.external
	}
	return a.s.service
}

// allocate gives key a VIP: its sticky one if free, else by hash and probe.
func (a *Allocator) allocate(key string) bool {
	p := a.poolOf(key)
	want, has := a.sticky[key]
	v, ok := p.take(key, want, has)
	if !ok {
		a.pending[key] = struct{}{}
		return false
	}
	delete(a.pending, key)
	delete(a.sticky, key)
	a.vips[key] = v
	a.dirty = true
	return true
}

// allocateAll allocates keys (sorted) in two passes: keys with a sticky preference first,
// so that a remembered VIP is not taken by a newcomer, then the others.
func (a *Allocator) allocateAll(keys []string) {
	for _, k := range keys {
		if _, ok := a.sticky[k]; ok {
			a.allocate(k)
		}
	}
	for _, k := range keys {
		if _, done := a.vips[k]; !done {
			a.allocate(k)
		}
	}
}

// VIP returns the IPv4 VIP held by a hostname or, with the "mes/" prefix, a
// MeshExternalService, and its IPv6 twin.
func (a *Allocator) VIP(key string) (v4, v6 netip.Addr, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.vips[key]
	if !ok {
		return netip.Addr{}, netip.Addr{}, false
	}
	return u4(v), twin(a.s.v6, v), true
}
