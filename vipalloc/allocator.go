package vipalloc

import (
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

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
	mes      *mesSource // MeshExternalServices' hostnames
	ms       *mesSource // MeshServices' hostnames

	hosts   [hostShards]hostMap // by hostHash(hostname) % hostShards
	mesVIPs map[string]uint32   // "mes/<name>", "ms/<name>" -> IPv4 VIP (hostname VIPs live in hostState)
	pending map[string]struct{} // keys whose pool was full last time
	skips   map[string]*candidate
	skipped []Skip

	table *Table
	sum   [2]uint64
	dirty bool // assignments changed since the state file was written
	// stateTimer writes the state file after a change (the first table's is written before
	// Allocate returns).
	stateTimer *time.Timer
	keyBuf     []byte
	entrySlab  []*Entry
}

// hostState is one hostname: the candidates proposing it, its VIP and the entries it has now
// (see cands, entries and avail). It fits in 16 bytes: most hostnames have one candidate
// whose own entry (&cand.Entry) is the hostname's one entry, held in the state itself, and
// the name is the candidate's; the lists (and the name) of a hostname that ever had
// several candidates, or an entry that is not its candidate's own, are behind the same
// pointer (hostLists, with hsMany set).
type hostState struct {
	// p is the hostname's *hostLists (hsMany set), or else its *candidate: the candidate of a
	// hostname with one, which stays after its removal (hsCand unset), to name the hostname
	// until its state is dropped or another comes.
	p       unsafe.Pointer
	vip     uint32
	hasVIP  bool
	touched bool
	bits    hostBits
}

type hostBits uint8

const (
	hsMany  hostBits = 1 << iota // p is the hostname's lists
	hsCand                       // (hsMany unset) p is a candidate proposing the hostname
	hsEntry                      // (hsMany unset) the hostname's one entry is &p.Entry
)

// hostLists holds the name, the candidates and the entries (sorted by key) of a hostname
// that has had several candidates or entries.
type hostLists struct {
	name    string
	cands   []*candidate
	entries []*Entry
}

// newHostState is the state of the hostname c proposes, with c (the hostMap makes its
// own in place).
func newHostState(c *candidate) *hostState {
	return &hostState{p: unsafe.Pointer(c), bits: hsCand}
}

// many is the hostname's lists, or nil when it has none.
func (hs *hostState) many() *hostLists {
	if hs.bits&hsMany == 0 {
		return nil
	}
	return (*hostLists)(hs.p)
}

// cand is the candidate of a hostname without lists (see p), or nil.
func (hs *hostState) cand() *candidate {
	if hs.bits&hsMany != 0 {
		return nil
	}
	return (*candidate)(hs.p)
}

// name is the hostname.
func (hs *hostState) name() string {
	if l := hs.many(); l != nil {
		return l.name
	}
	return hs.cand().Hostname
}

// cands returns the candidates proposing the hostname (the caller may reorder them).
func (hs *hostState) cands() []*candidate {
	switch {
	case hs.bits&hsMany != 0:
		return hs.many().cands
	case hs.bits&hsCand != 0:
		// The one candidate, as a slice of the pointer itself (a *candidate in p's place).
		return unsafe.Slice((**candidate)(unsafe.Pointer(&hs.p)), 1)
	}
	return nil
}

// lists moves the hostname's name, candidate and entry to its lists (if not there yet) and
// returns them.
func (hs *hostState) lists() *hostLists {
	if l := hs.many(); l != nil {
		return l
	}
	l := &hostLists{name: hs.name(), cands: slices.Clone(hs.cands())}
	if hs.bits&hsEntry != 0 {
		l.entries = []*Entry{&hs.cand().Entry}
	}
	hs.p, hs.bits = unsafe.Pointer(l), hsMany
	return l
}

func (hs *hostState) addCand(c *candidate) {
	if hs.bits&(hsMany|hsCand|hsEntry) == 0 {
		hs.p, hs.bits = unsafe.Pointer(c), hsCand
		return
	}
	l := hs.lists()
	l.cands = append(l.cands, c)
}

func (hs *hostState) removeCand(c *candidate) {
	l := hs.many()
	if l == nil {
		if hs.bits&hsCand != 0 && hs.cand() == c {
			hs.bits &^= hsCand
		}
		return
	}
	if i := slices.Index(l.cands, c); i >= 0 {
		l.cands = slices.Delete(l.cands, i, i+1)
	}
}

// numEntries and entry read the hostname's entries, sorted by key.
func (hs *hostState) numEntries() int {
	switch {
	case hs.bits&hsMany != 0:
		return len(hs.many().entries)
	case hs.bits&hsEntry != 0:
		return 1
	}
	return 0
}

func (hs *hostState) entry(i int) *Entry {
	if l := hs.many(); l != nil {
		return l.entries[i]
	}
	return &hs.cand().Entry
}

// setEntries replaces the hostname's entries (sorted by key). A hostname back to one
// candidate showing its own entry leaves its lists.
func (hs *hostState) setEntries(es []*Entry) {
	l := hs.many()
	switch {
	case l != nil && len(l.cands) == 1 && len(es) == 1 && es[0] == &l.cands[0].Entry:
		hs.p, hs.bits = unsafe.Pointer(l.cands[0]), hsCand|hsEntry
	case l != nil:
		l.entries = es
	case len(es) == 0:
		hs.bits &^= hsEntry
	case len(es) == 1 && es[0] == &hs.cand().Entry:
		hs.bits |= hsEntry
	default:
		hs.lists().entries = es
	}
}

// avail returns the hostname's available entry (at most one of its entries is), or nil.
func (hs *hostState) avail() *Entry {
	for i := range hs.numEntries() {
		if e := hs.entry(i); e.Status == Available {
			return e
		}
	}
	return nil
}

// New validates cfg and reads the state file (a corrupt one is logged and ignored).
func New(cfg Config) (*Allocator, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	a := &Allocator{s: s, sticky: s.loadState(), vos: map[string]*expander{}, mes: newMESSource(mesh.KindMeshExternalService, &s.v6),
		ms:    newMESSource(mesh.KindMeshService, &s.v6),
		hosts: [hostShards]hostMap{newHostMap(0), newHostMap(0)}, mesVIPs: map[string]uint32{}, pending: map[string]struct{}{},
		skips: map[string]*candidate{}}
	if s.defaultVIPs {
		a.defaults = newDefaultExpander(s.defaultPort, &s.v6)
		a.defaults.hosts = &a.hosts
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

// hostShards is how many maps hold the hostnames: candidates of different shards are placed
// concurrently after a large expansion.
const hostShards = 2

// host is the state of hostname h, or nil.
func (a *Allocator) host(h string) *hostState {
	x := hostHash(h)
	return a.hosts[x%hostShards].get(x, h)
}

func (a *Allocator) hostCount() int {
	n := 0
	for _, m := range a.hosts {
		n += m.len()
	}
	return n
}

// touchHost marks a hostname for re-resolution (if it still exists).
func (r *round) touchHost(h string) {
	if hs := r.a.host(h); hs != nil {
		r.touch(hs)
	}
}

func (r *round) add(c *candidate) {
	if c.Hostname == "" {
		r.a.skips[c.Origin().Kind+"/"+c.Key()] = c
		r.skipsChanged = true
		return
	}
	x := hostHash(c.Hostname)
	r.touch(r.a.place(&r.a.hosts[x%hostShards], x, c))
}

func (r *round) remove(c *candidate) {
	if c.Hostname == "" {
		delete(r.a.skips, c.Origin().Kind+"/"+c.Key())
		r.skipsChanged = true
		return
	}
	x := hostHash(c.Hostname)
	if hs := unplace(&r.a.hosts[x%hostShards], x, c); hs != nil {
		r.touch(hs)
	}
}

// place adds c to its hostname (hashing to h) in hosts (its shard) and returns the
// hostname's state.
func (a *Allocator) place(hosts *hostMap, h uint64, c *candidate) *hostState {
	hs := hosts.get(h, c.Hostname)
	if hs == nil {
		return hosts.add(h, c)
	}
	hs.addCand(c)
	return hs
}

// unplace removes c from its hostname (hashing to h) in hosts; nil when the hostname is
// unknown.
func unplace(hosts *hostMap, h uint64, c *candidate) *hostState {
	hs := hosts.get(h, c.Hostname)
	if hs == nil {
		return nil
	}
	hs.removeCand(c)
	return hs
}

// shareTags makes a policy candidate whose tags are just {kuma.io/service: X} share the map
// of the default name of X (the common "{{service}}.mesh" policies): fewer maps to keep.
// Called before the round's candidates are placed (the default names are found through the
// hostname states, which placing writes).
func (a *Allocator) shareTags(c *candidate, buf *[]byte) {
	if a.defaults == nil || !c.source().explicit || c.isPublished() || c.tags == nil || c.flags&tagCount != 0 {
		return
	}
	svc, ok := c.Tags().Get(mesh.ServiceTag)
	if !ok {
		return
	}
	b := append(append((*buf)[:0], defaultKeyPrefix...), svc...)
	b = append(b, '}')
	*buf = b
	if d := a.defaults.find(keyHash(b), b); d != nil {
		c.tags = d.tags // both one tag
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
	first := a.table == nil
	for i := range a.hosts {
		a.hosts[i].reclaim() // the last round's lists are gone
	}
	r := &round{a: a}
	if s.Mesh != a.meshName {
		a.resetModel(r)
		a.meshName = s.Mesh
	}
	a.updatePolicies(r, s)
	var mesAdded []string // the resources' VIP keys ("mes/<name>", "ms/<name>")
	for _, src := range []*mesSource{a.mes, a.ms} {
		added, removed := src.update(r, s)
		for _, n := range removed {
			a.releaseMES(src.key + n)
		}
		for _, n := range added {
			mesAdded = append(mesAdded, src.key+n)
		}
	}
	for k := range a.pending {
		if a.ownerSource(k) != nil {
			mesAdded = append(mesAdded, k)
		} else {
			r.touchHost(k)
		}
	}
	t := a.resolve(r, mesAdded)
	if a.dirty && a.s.stateFile != "" {
		if first {
			a.writeStateLocked() // the first table's VIPs are kept before it is served
		} else if a.stateTimer == nil {
			a.stateTimer = time.AfterFunc(stateDelay, a.Flush)
		}
	}
	return t, nil
}

// stateDelay is how long after a change the state file is written: off the path of the
// change, since writing it goes over every assignment (100,000 names: ~50 ms), and once
// for a burst of changes. Flush writes it at once (the agent stops).
const stateDelay = time.Second

// Flush writes the state file now if assignments changed since it was last written.
func (a *Allocator) Flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stateTimer != nil {
		a.stateTimer.Stop()
		a.stateTimer = nil
	}
	if a.dirty && a.s.stateFile != "" {
		a.writeStateLocked()
	}
}

func (a *Allocator) writeStateLocked() {
	if err := a.s.writeState(a.eachAssignment); err != nil {
		a.s.log.Warn("vipalloc: could not write the state file", "err", err)
		return
	}
	a.dirty = false
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
