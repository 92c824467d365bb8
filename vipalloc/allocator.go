package vipalloc

import (
	"fmt"
	"maps"
	"net/netip"
	"runtime"
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
	mesVIPs map[string]uint32   // "mes/<name>" -> IPv4 VIP (hostname VIPs live in hostState)
	pending map[string]struct{} // keys whose pool was full last time
	skips   map[string]*candidate
	skipped []Skip

	table     *Table
	sum       [2]uint64
	dirty     bool // assignments changed since the state file was written
	candSlab  []*candidate
	keyBuf    []byte
	entrySlab []*Entry
}

// hostState is one hostname: the candidates proposing it, its VIP and the entries it has now.
type hostState struct {
	host    string
	cands   []*candidate
	entries []*Entry // sorted by key
	avail   *Entry
	vip     uint32
	hasVIP  bool
	touched bool
}

// New validates cfg and reads the state file (a corrupt one is logged and ignored).
func New(cfg Config) (*Allocator, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	a := &Allocator{s: s, sticky: s.loadState(), vos: map[string]*expander{}, mes: newMESSource(),
		hosts: map[string]*hostState{}, mesVIPs: map[string]uint32{}, pending: map[string]struct{}{},
		skips: map[string]*candidate{}}
	if s.defaultVIPs {
		a.defaults = newDefaultExpander(s.defaultPort)
	}
	return a, nil
}

// round collects what one Allocate changed.
type round struct {
	a            *Allocator
	touched      []*hostState
	skipsChanged bool
}

func (r *round) touch(hs *hostState) {
	if !hs.touched {
		hs.touched = true
		r.touched = append(r.touched, hs)
	}
}

// touchHost marks a hostname for re-resolution (if it still exists).
func (r *round) touchHost(h string) {
	if hs := r.a.hosts[h]; hs != nil {
		r.touch(hs)
	}
}

func (r *round) add(c *candidate) {
	if c.Hostname == "" {
		r.a.skips[c.src.origin.Kind+"/"+c.Key] = c
		r.skipsChanged = true
		return
	}
	a := r.a
	a.shareTags(c)
	hs := a.hosts[c.Hostname]
	if hs == nil {
		hs = &hostState{host: c.Hostname}
		a.hosts[c.Hostname] = hs
	}
	if hs.cands == nil {
		// One-element slices from a shared slab: most hostnames have a single candidate.
		if len(a.candSlab) == cap(a.candSlab) {
			a.candSlab = make([]*candidate, 0, 1024)
		}
		l := len(a.candSlab)
		a.candSlab = append(a.candSlab, c)
		hs.cands = a.candSlab[l : l+1 : l+1]
	} else {
		hs.cands = append(hs.cands, c)
	}
	r.touch(hs)
}

func (r *round) remove(c *candidate) {
	if c.Hostname == "" {
		delete(r.a.skips, c.src.origin.Kind+"/"+c.Key)
		r.skipsChanged = true
		return
	}
	hs := r.a.hosts[c.Hostname]
	if hs == nil {
		return
	}
	if i := slices.Index(hs.cands, c); i >= 0 {
		hs.cands = slices.Delete(hs.cands, i, i+1)
	}
	r.touch(hs)
}

// shareTags makes a policy candidate whose tags are just {kuma.io/service: X} share the map
// of the default name of X (the common "{{service}}.mesh" policies): fewer maps to keep.
func (a *Allocator) shareTags(c *candidate) {
	if a.defaults == nil || !c.src.explicit || c.published || len(c.Tags) != 1 {
		return
	}
	svc, ok := c.Tags[mesh.ServiceTag]
	if !ok {
		return
	}
	a.keyBuf = append(append(a.keyBuf[:0], defaultKeyName+"{"+mesh.ServiceTag+"="...), svc...)
	a.keyBuf = append(a.keyBuf, '}')
	if d := a.defaults.cands[string(a.keyBuf)]; d != nil {
		c.Tags = d.Tags
	}
}

// Allocate expands s into hostnames, allocates their VIPs and returns the new Table. Only a
// nil snapshot is an error: problems with single names are NotAvailable entries or skips.
func (a *Allocator) Allocate(s *mesh.Snapshot) (*Table, error) {
	if s == nil {
		return nil, fmt.Errorf("vipalloc: nil snapshot")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &round{a: a}
	if s.Mesh != a.meshName {
		a.resetModel(r)
		a.meshName = s.Mesh
	}
	a.updatePolicies(r, s)
	mesAdded, mesRemoved := a.mes.update(r, s)
	for _, n := range mesRemoved {
		a.releaseMES(mesKeyPrefix + n)
	}
	for k := range a.pending {
		if strings.HasPrefix(k, mesKeyPrefix) {
			mesAdded = append(mesAdded, strings.TrimPrefix(k, mesKeyPrefix))
		} else {
			r.touchHost(k)
		}
	}
	t := a.resolve(r, mesAdded)
	if a.dirty && a.s.stateFile != "" {
		if err := a.s.saveState(a.assignments()); err != nil {
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
	var changes []change
	old := a.dps
	i, j := 0, 0
	for i < len(old) || j < len(dps) {
		switch {
		case i < len(old) && j < len(dps) && old[i] == dps[j]:
			i++
			j++
		case j == len(dps) || i < len(old) && old[i].Name < dps[j].Name:
			changes = append(changes, change{old[i], -1})
			i++
		case i == len(old) || dps[j].Name < old[i].Name:
			changes = append(changes, change{dps[j], +1})
			j++
		default: // same name, another object
			if !sameInbounds(old[i], dps[j]) {
				changes = append(changes, change{old[i], -1}, change{dps[j], +1})
			}
			i++
			j++
		}
	}
	a.dps = dps
	if len(a.hosts) == 0 && len(dps) > 1024 {
		a.hosts = make(map[string]*hostState, len(dps))
		r.touched = make([]*hostState, 0, len(dps))
	}
	jobs := make([]job, 0, len(kept)+len(fresh))
	var keyed []*expander
	if len(changes) > 0 {
		keyed = append(keyed, kept...)
	}
	keyed = append(keyed, fresh...)
	idx := keyTable(keyed)
	var changed, all []inbound
	if len(kept) > 0 && len(changes) > 0 {
		changed = inbounds(changes, idx, len(kept) > 1)
	}
	if len(fresh) > 0 {
		list := make([]change, len(dps))
		for i, dp := range dps {
			list[i] = change{dp, +1}
		}
		all = inbounds(list, idx, len(fresh) > 1)
	}
	for _, x := range kept {
		jobs = append(jobs, job{x: x, in: changed})
	}
	for _, x := range fresh {
		if len(dps) > 1024 {
			x.cands = make(map[string]*candidate, len(dps)/8)
		}
		jobs = append(jobs, job{x: x, in: all})
	}
	runJobs(jobs, len(changed)*len(kept)+len(all)*len(fresh))
	for _, jb := range jobs {
		for _, ev := range jb.x.events {
			if ev.add {
				r.add(ev.c)
			} else {
				r.remove(ev.c)
			}
		}
		jb.x.events = nil
	}
}

// change is a dataplane that appeared (+1) or went away (-1).
type change struct {
	dp    *mesh.Dataplane
	delta int32
}

// job is the inbounds one expander has to visit.
type job struct {
	x  *expander
	in []inbound
}

func (jb job) run() {
	for i := range jb.in {
		jb.x.visit(&jb.in[i])
	}
}

// keyTable numbers the tag keys the expanders read (nil when there are more than 64: the
// expanders then look tags up themselves) and binds the expanders to it.
func keyTable(xs []*expander) map[string]int {
	idx := map[string]int{}
	for _, x := range xs {
		x.keys(func(k string) {
			if _, ok := idx[k]; !ok {
				idx[k] = len(idx)
			}
		})
	}
	if len(idx) > 64 {
		return nil
	}
	for _, x := range xs {
		x.bind(idx)
	}
	return idx
}

// inbounds flattens the inbounds of changed dataplanes; with a key table and several
// expanders to share the work (shared), each inbound's values are looked up once here.
func inbounds(changes []change, idx map[string]int, shared bool) []inbound {
	n := 0
	for _, ch := range changes {
		n += len(ch.dp.Networking.Inbound)
	}
	out := make([]inbound, 0, n)
	for _, ch := range changes {
		for i := range ch.dp.Networking.Inbound {
			out = append(out, inbound{tags: ch.dp.Networking.Inbound[i].Tags, delta: ch.delta})
		}
	}
	if idx == nil || !shared || n < 1024 {
		return out
	}
	keys := make([]string, len(idx))
	for k, i := range idx {
		keys[i] = k
	}
	vals := make([]string, n*len(keys))
	fill := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			in := &out[j]
			in.vals = vals[j*len(keys) : (j+1)*len(keys) : (j+1)*len(keys)]
			for i, k := range keys {
				if v, ok := in.tags[k]; ok {
					in.vals[i] = v
					in.mask |= 1 << uint(i)
				}
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fill(n/2, n)
	}()
	fill(0, n/2)
	<-done
	return out
}

// parallelWork is the number of dataplane visits above which expanders run concurrently.
const parallelWork = 8192

// runJobs runs the jobs, concurrently (one goroutine per CPU at most) when there is enough
// work. Every goroutine has ended when it returns.
func runJobs(jobs []job, work int) {
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	if work < parallelWork || workers < 2 {
		for _, jb := range jobs {
			jb.run()
		}
		return
	}
	// Heaviest first (policies whose tuples have more tags make more candidates), so the
	// goroutines finish together; events are applied in the jobs' own order afterwards.
	order := slices.Clone(jobs)
	sort.SliceStable(order, func(i, j int) bool { return order[i].x.weight() > order[j].x.weight() })
	next := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range next {
				jb.run()
			}
		}()
	}
	for _, jb := range order {
		next <- jb
	}
	close(next)
	wg.Wait()
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

// vipOf is the VIP held by key (a hostname or "mes/<name>").
func (a *Allocator) vipOf(key string) (uint32, bool) {
	if strings.HasPrefix(key, mesKeyPrefix) {
		v, ok := a.mesVIPs[key]
		return v, ok
	}
	if hs := a.hosts[key]; hs != nil && hs.hasVIP {
		return hs.vip, true
	}
	return 0, false
}

// assignments is every key holding a VIP (what the state file keeps).
func (a *Allocator) assignments() map[string]uint32 {
	out := make(map[string]uint32, len(a.hosts)+len(a.mesVIPs))
	for k, v := range a.mesVIPs {
		out[k] = v
	}
	for h, hs := range a.hosts {
		if hs.hasVIP {
			out[h] = hs.vip
		}
	}
	return out
}

// releaseMES frees the VIP of a MeshExternalService key.
func (a *Allocator) releaseMES(key string) {
	delete(a.pending, key)
	if v, ok := a.mesVIPs[key]; ok {
		delete(a.mesVIPs, key)
		a.s.external.release(v)
		a.dirty = true
	}
}

// releaseHost frees the VIP of a hostname.
func (a *Allocator) releaseHost(hs *hostState) {
	delete(a.pending, hs.host)
	if hs.hasVIP {
		hs.hasVIP = false
		a.s.service.release(hs.vip)
		a.dirty = true
	}
}

func (a *Allocator) poolOf(key string) *pool {
	if strings.HasPrefix(key, mesKeyPrefix) {
		return a.s.external
	}
	return a.s.service
}

// take gives key a VIP from p: its sticky one if free, else by hash and probe. A full pool
// leaves key pending.
func (a *Allocator) take(p *pool, key string) (uint32, bool) {
	want, has := a.sticky[key]
	v, ok := p.take(key, want, has)
	if !ok {
		a.pending[key] = struct{}{}
		return 0, false
	}
	if len(a.pending) > 0 {
		delete(a.pending, key)
	}
	if has {
		delete(a.sticky, key)
	}
	a.dirty = true
	return v, true
}

// allocateHosts gives hostnames (sorted) their VIPs in two passes: names with a sticky
// preference first, so that a remembered VIP is not taken by a newcomer, then the others.
func (a *Allocator) allocateHosts(hss []*hostState) {
	if p := a.s.service; len(p.used) == 0 && len(hss) > 1024 {
		p.used = make(map[uint32]struct{}, len(hss))
	}
	for pass := 0; pass < 2; pass++ {
		for _, hs := range hss {
			if hs.hasVIP {
				continue
			}
			if _, sticky := a.sticky[hs.host]; (pass == 0) != sticky {
				continue
			}
			hs.vip, hs.hasVIP = a.take(a.s.service, hs.host)
		}
	}
}

// allocateMES does the same for MeshExternalService keys (sorted).
func (a *Allocator) allocateMES(keys []string) {
	for pass := 0; pass < 2; pass++ {
		for _, k := range keys {
			if _, done := a.mesVIPs[k]; done {
				continue
			}
			if _, sticky := a.sticky[k]; (pass == 0) != sticky {
				continue
			}
			if v, ok := a.take(a.s.external, k); ok {
				a.mesVIPs[k] = v
			}
		}
	}
}

// VIP returns the IPv4 VIP held by a hostname or, with the "mes/" prefix, a
// MeshExternalService, and its IPv6 twin.
func (a *Allocator) VIP(key string) (v4, v6 netip.Addr, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.vipOf(key)
	if !ok {
		return netip.Addr{}, netip.Addr{}, false
	}
	return u4(v), twin(a.s.v6, v), true
}
