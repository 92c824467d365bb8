package vipalloc

import (
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/mesh"
)

// The model side of an allocation: which dataplanes and policies changed since the last
// snapshot, and the expansion of their inbounds into candidates (concurrently when large).

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
		x := newVOExpander(vo, &a.s.v6)
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
	old := a.dps
	changes, sorted := diffDataplanes(old, dps)
	if !sorted { // snapshots are sorted by name; one built by hand may not be
		dps = slices.Clone(dps)
		sort.Slice(dps, func(i, j int) bool { return dps[i].Name < dps[j].Name })
		changes, _ = diffDataplanes(old, dps)
	}
	a.dps = dps
	if a.hostCount() == 0 && len(dps) > 1024 {
		for i := range a.hosts {
			a.hosts[i] = newHostMap(len(dps) / hostShards)
		}
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
	// With no previous dataplanes every dataplane is a +1 change: one list serves both.
	firstModel := len(old) == 0
	if len(kept) > 0 && len(changes) > 0 {
		changed = inbounds(changes, idx, len(kept) > 1 || firstModel && len(fresh) > 0)
	}
	switch {
	case len(fresh) == 0:
	case firstModel && changed != nil:
		all = changed
	default:
		list := make([]change, len(dps))
		for i, dp := range dps {
			list[i] = change{dp, +1}
		}
		all = inbounds(list, idx, len(fresh) > 1)
	}
	for _, x := range kept {
		x.presize(len(changed)) // the default names' first expansion
		jobs = append(jobs, job{x: x, in: changed})
	}
	for _, x := range fresh {
		x.presize(len(dps))
		jobs = append(jobs, job{x: x, in: all})
	}
	runJobs(jobs, len(changed)*len(kept)+len(all)*len(fresh))
	r.apply(jobs)
}

// apply places the jobs' events (new and dropped candidates) in job order; many of them are
// placed by one goroutine per hostname shard.
func (r *round) apply(jobs []job) {
	if d := r.a.defaults; d != nil {
		for _, jb := range jobs {
			for _, ev := range jb.x.events {
				if ev.add {
					r.a.shareTags(ev.c, &r.a.keyBuf)
				}
			}
		}
		// The default names added this round are found through their hostname states from
		// now on.
		defer func() { d.fresh = candMap{} }()
	}
	n := 0
	for _, jb := range jobs {
		n += len(jb.x.events)
	}
	if n < parallelWork {
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
		return
	}
	var touched [hostShards][]*hostState
	for s := range touched {
		touched[s] = make([]*hostState, 0, n/hostShards+n/8) // a shard's share, with room
	}
	place := func(s int) {
		hosts := &r.a.hosts[s]
		for _, jb := range jobs {
			for _, ev := range jb.x.events {
				if int(ev.shard) != s {
					continue
				}
				var hs *hostState
				if ev.add {
					hs = r.a.place(hosts, ev.h, ev.c)
				} else {
					hs = unplace(hosts, ev.h, ev.c)
				}
				if hs != nil && !hs.touched {
					hs.touched = true
					touched[s] = append(touched[s], hs)
				}
			}
		}
	}
	var wg sync.WaitGroup
	for s := 1; s < hostShards; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			place(s)
		}()
	}
	place(0)
	wg.Wait()
	for _, jb := range jobs { // skips, in order
		for _, ev := range jb.x.events {
			if ev.shard < 0 {
				if ev.add {
					r.add(ev.c)
				} else {
					r.remove(ev.c)
				}
			}
		}
		jb.x.events = nil
	}
	for _, t := range touched {
		r.touched = append(r.touched, t...)
	}
}

// diffDataplanes walks the previous (sorted) dataplanes and the new ones by name: the same
// object is unchanged (no comparison at all), the same name with other inbound tags is a
// change. It reports false when dps turns out not to be sorted by name; it only compares
// names where dps differs from old, so an unchanged mesh costs a pointer walk.
func diffDataplanes(old, dps []*mesh.Dataplane) (changes []change, sorted bool) {
	if len(old) == 0 {
		changes = make([]change, 0, len(dps))
	}
	i, j := 0, 0
	lastSame := false
	for i < len(old) || j < len(dps) {
		if i < len(old) && j < len(dps) && old[i] == dps[j] {
			if j > 0 && !lastSame && dps[j-1].Name >= dps[j].Name {
				return nil, false
			}
			lastSame = true
			i++
			j++
			continue
		}
		if j < len(dps) && j > 0 && dps[j-1].Name >= dps[j].Name {
			return nil, false
		}
		lastSame = false
		switch {
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
	return changes, true
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
	vectors := idx != nil && shared && len(changes) >= 1024
	var keys []string
	if vectors {
		keys = make([]string, len(idx))
		for k, i := range idx {
			keys[i] = k
		}
	}
	count := func(chs []change) int {
		n := 0
		for _, ch := range chs {
			for i := range ch.dp.Networking.Inbound {
				if ch.dp.Networking.Inbound[i].Named() {
					n++
				}
			}
		}
		return n
	}
	var out []inbound
	var vals []string
	fill := func(chs []change, j int) {
		for _, ch := range chs {
			for i := range ch.dp.Networking.Inbound {
				if !ch.dp.Networking.Inbound[i].Named() {
					continue // Ignored, or on a reserved port: no names (as in Kuma)
				}
				in := &out[j]
				in.tags, in.delta = ch.dp.Networking.Inbound[i].Tags, ch.delta
				if vectors {
					in.vals = vals[j*len(keys) : (j+1)*len(keys) : (j+1)*len(keys)]
					for x, k := range keys {
						if v, ok := in.tags.Get(k); ok {
							in.vals[x] = v
							in.mask |= 1 << uint(x)
						}
					}
				}
				j++
			}
		}
	}
	if len(changes) < parallelWork {
		n := count(changes)
		out, vals = make([]inbound, n), make([]string, n*len(keys))
		fill(changes, 0)
		return out
	}
	// Large lists: count, then fill, each in two halves on two goroutines.
	mid := len(changes) / 2
	var n0, n1 int
	both(func() { n0 = count(changes[:mid]) }, func() { n1 = count(changes[mid:]) })
	out, vals = make([]inbound, n0+n1), make([]string, (n0+n1)*len(keys))
	both(func() { fill(changes[:mid], 0) }, func() { fill(changes[mid:], n0) })
	return out
}

// both runs f and g concurrently and returns when both have.
func both(f, g func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g()
	}()
	f()
	<-done
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
		x, y := &a.Networking.Inbound[i], &b.Networking.Inbound[i]
		if x.Named() != y.Named() || !x.Tags.Equal(y.Tags) {
			return false
		}
	}
	return true
}

// inbound is one dataplane inbound as the expanders see it: its tags and, when the round
// has a key table, the values of the table's keys (so each tag is looked up once, not once
// per policy).
type inbound struct {
	tags  mesh.Tags
	vals  []string // nil: look up tags
	mask  uint64   // bit i: vals[i] is present
	delta int32
}

func (in *inbound) get(k string, idx int) (string, bool) {
	if in.vals != nil {
		if in.mask&(1<<uint(idx)) == 0 {
			return "", false
		}
		return in.vals[idx], true
	}
	return in.tags.Get(k)
}

// presize sizes the candidate map (the default names': of this round's) and event list of an
// empty expander about to visit n inbounds, when n is large: a guess of n/4 tuples per tag
// taken from inbounds (up to four), so that the map rarely grows (each growth rehashes every
// key) without reserving n slots per policy.
func (x *expander) presize(n int) {
	if n <= 1024 || !x.empty() {
		return
	}
	guess := n * min(x.weight(), 4) / 4
	if !x.isDefault {
		x.cands = newCandMap(guess)
	} else {
		x.fresh = newCandMap(guess)
		// At most one event per inbound, and the list is dropped once applied: reserving n
		// costs less than growing a list of n by a quarter at a time (every step garbage).
		guess = n
	}
	x.events = make([]event, 0, guess)
}

// empty reports whether the expander has no candidate (the default names': none placed
// either, which the mesh's hostname states tell).
func (x *expander) empty() bool {
	if x.cands.len() > 0 || x.fresh.len() > 0 {
		return false
	}
	if x.isDefault {
		for i := range x.hosts {
			if x.hosts[i].len() > 0 {
				return false
			}
		}
	}
	return true
}

// weight estimates the expander's work per inbound: the tags its tuples take from inbounds.
func (x *expander) weight() int {
	if x.isDefault {
		return 1
	}
	w := 0
	for i := range x.sels {
		for _, d := range x.sels[i].dest {
			if d.fromInbound {
				w++
			}
		}
	}
	return w
}

// keys calls f with every tag key the expander reads.
func (x *expander) keys(f func(string)) {
	if x.isDefault {
		f(mesh.ServiceTag)
		return
	}
	for i := range x.sels {
		for _, m := range x.sels[i].match {
			f(m.k)
		}
		for _, d := range x.sels[i].dest {
			f(d.k)
		}
	}
}

// bind points the compiled selectors at the round's key table.
func (x *expander) bind(idx map[string]int) {
	for i := range x.sels {
		s := &x.sels[i]
		for j := range s.match {
			s.match[j].idx = idx[s.match[j].k]
		}
		for j := range s.dest {
			s.dest[j].idx = idx[s.dest[j].k]
		}
	}
	x.svcIdx = idx[mesh.ServiceTag]
}

func newDefaultExpander(port uint32, twin *netip.Prefix) *expander {
	return &expander{name: defaultKeyName, isDefault: true, defaultPort: port, twin: twin,
		detail: &entryDetail{twin: twin}, cands: newCandMap(0)}
}

func newVOExpander(vo *mesh.VirtualOutbound, twin *netip.Prefix) *expander {
	x := &expander{name: vo.Name, vo: vo, cands: newCandMap(0), twin: twin,
		src: &source{origin: Origin{Kind: mesh.KindVirtualOutbound, Name: vo.Name}, explicit: true, created: vo.CreationTime()}}
	tpl, err := hostname.CompileVirtualOutbound(vo.Conf.Templates())
	var need []string
	if err != nil {
		x.broken = err.Error() // its selectors still tell which inbounds it concerns
	} else {
		x.tpl = tpl
		need = tpl.TagKeys()
	}
	for _, s := range dedupSelectors(vo.Selectors) {
		cs := compiledSel{detail: &entryDetail{twin: twin, src: x.src, origin: x.src.origin, selector: s.Match}}
		ds := map[string]dest{}
		for _, tg := range s.Match { // sorted by key
			k, v := tg.Key, tg.Value
			cs.match = append(cs.match, kv{k: k, v: v, wild: v == mesh.Wildcard})
			if v != mesh.Wildcard {
				cs.nExact++
				ds[k] = dest{k: k, fixed: v}
			}
		}
		cs.nTags = len(s.Match)
		for _, k := range need {
			if _, ok := ds[k]; !ok {
				ds[k] = dest{k: k, fromInbound: true}
			}
		}
		for _, d := range ds {
			cs.dest = append(cs.dest, d)
		}
		sort.Slice(cs.dest, func(i, j int) bool { return cs.dest[i].k < cs.dest[j].k })
		cs.detail.ntags = uint32(len(cs.dest))
		x.sels = append(x.sels, cs)
	}
	if len(x.sels) > selIndexMin {
		x.sidx = newSelIndex(x.sels)
	}
	return x
}

func (s *compiledSel) matches(in *inbound) bool {
	if len(s.match) == 0 {
		return false
	}
	for i := range s.match {
		m := &s.match[i]
		v, ok := in.get(m.k, m.idx)
		if !ok || !m.wild && v != m.v {
			return false
		}
	}
	return true
}
