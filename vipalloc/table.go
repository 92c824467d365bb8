package vipalloc

import (
	"math/bits"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/mesh"
)

// Target is one port of a multi-port entry and what it routes to.
type Target struct {
	Port     uint32    `json:"port"`
	Origin   Origin    `json:"origin"`
	Key      string    `json:"key"`
	Tags     mesh.Tags `json:"tags"`
	Selector mesh.Tags `json:"selector,omitempty"`
}

// Skip is a tuple or MeshExternalService that produced no hostname (a tag or label the
// template needs is missing, or the rendered name is invalid). It is not an error.
type Skip struct {
	Origin Origin `json:"origin"`
	// Key is `<policy>{k1=v1,...}` with the tuple's known values.
	Key                 string    `json:"key"`
	Selector            mesh.Tags `json:"selector,omitempty"`
	Tags                mesh.Tags `json:"tags,omitempty"`
	MeshExternalService string    `json:"meshExternalService,omitempty"`
	MeshService         string    `json:"meshService,omitempty"`
	Reason              string    `json:"reason"`
}

// Outbound is what xds needs to build one listener: a VIP:port, the hostname it serves
// and the destination (service tags, or a MeshExternalService by name).
type Outbound struct {
	IPv4     netip.Addr
	IPv6     netip.Addr
	Port     uint32
	Hostname string
	Tags     mesh.Tags
	Origin   Origin
	// MeshExternalService is the resource name when Origin points at one (or at a
	// HostnameGenerator that named one); empty otherwise.
	MeshExternalService string
	// MeshService is the MeshService a HostnameGenerator named (the outbound is its port
	// Port); empty otherwise.
	MeshService string
}

// MESStatus is the MeshExternalService design's status block of one MeshExternalService.
type MESStatus struct {
	VIP       MESVIP       `json:"vip"`
	Addresses []MESAddress `json:"addresses"`
}

// MESVIP is status.vip.
type MESVIP struct {
	Value string `json:"value"`
	Type  string `json:"type"` // "Kuma"
}

// MESAddress is one status.addresses element.
type MESAddress struct {
	Hostname string `json:"hostname"`
	Status   Status `json:"status"`
	Origin   Origin `json:"origin"`
	Reason   string `json:"reason,omitempty"`
}

// Table is the result of one allocation: immutable, safe for concurrent readers.
//
// Its indexes are a shared base plus a small delta of what changed since the base was
// built, so that a table derived from the previous one after a small change costs
// O(change), not O(mesh). Lookups check the delta first.
type Table struct {
	base  *baseIndex
	delta *index
	// v6 is the twin prefix: an IPv6 VIP in it resolves through its IPv4 (invalid for
	// hand-built tables, whose IPv6 addresses are all indexed in other6).
	v6 netip.Prefix
	// all holds every entry, NotAvailable ones included, sorted by hostname then key.
	all     []*Entry
	skipped []Skip
	mes     map[string]MESStatus
	ms      map[string]MeshServiceStatus // set by the allocator after building or deriving
	hash    string
	count   int // available hostnames

	obOnce    sync.Once
	outbounds []Outbound
}

// index is a delta: names and VIPs whose available entry changed since the base was built
// (a nil value means removed).
type index struct {
	names map[string]*Entry
	addrs map[uint32]*Entry
}

func newIndex(n int) *index {
	return &index{names: make(map[string]*Entry, n), addrs: make(map[uint32]*Entry, n)}
}

// Lookup returns the available entry for a hostname. name may carry a final dot and any case.
func (t *Table) Lookup(name string) (*Entry, bool) {
	if t == nil {
		return nil, false
	}
	name = strings.TrimSuffix(name, ".")
	if e, ok := t.lookupName(name); ok {
		return e, true
	}
	if hasUpper(name) {
		return t.lookupName(strings.ToLower(name))
	}
	return nil, false
}

// hasUpper reports whether s has an ASCII capital letter. Every miss asks (a resolver's
// search domains make most queries miss), so it tests 8 bytes at a time: with each byte's
// top bit cleared first (no carry crosses bytes), adding 0x80-'A' sets the top bit of the
// bytes >= 'A' and adding 0x80-('Z'+1) that of the bytes > 'Z'; bytes that had their top
// bit set are no letters.
func hasUpper(s string) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		low := x &^ tops
		if (low+(0x80-'A')*ones)&^(low+(0x80-'Z'-1)*ones)&^x&tops != 0 {
			return true
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

func (t *Table) lookupName(name string) (*Entry, bool) {
	if t.delta != nil {
		if e, ok := t.delta.names[name]; ok {
			return e, e != nil
		}
	}
	return t.base.name(name)
}

// LookupAddr returns the entry owning a VIP (IPv4 or its IPv6 twin), for PTR.
func (t *Table) LookupAddr(ip netip.Addr) (*Entry, bool) {
	if t == nil {
		return nil, false
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return t.lookupV4(v4u(ip))
	}
	if v4, ok := twinOf(t.v6, ip); ok {
		if e, ok := t.lookupV4(v4); ok && e.IPv6() == ip {
			return e, true
		}
	}
	e, ok := t.base.other6[ip]
	return e, ok
}

func (t *Table) lookupV4(a uint32) (*Entry, bool) {
	if t.delta != nil {
		if e, ok := t.delta.addrs[a]; ok {
			return e, e != nil
		}
	}
	return t.base.addr(a)
}

// Entries returns every entry, NotAvailable ones included, sorted by hostname. Do not modify.
func (t *Table) Entries() []*Entry {
	if t == nil {
		return nil
	}
	return t.all
}

// Available returns the available entries, sorted by hostname.
func (t *Table) Available() []*Entry {
	var out []*Entry
	for _, e := range t.Entries() {
		if e.Status == Available {
			out = append(out, e)
		}
	}
	return out
}

// Skipped returns the tuples and MeshExternalServices that produced no hostname, with the
// reason, sorted by key. Do not modify.
func (t *Table) Skipped() []Skip {
	if t == nil {
		return nil
	}
	return t.skipped
}

// Len is the number of available hostnames.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.count
}

// Outbounds returns one element per available VIP and port, sorted by VIP then port. Every
// hostname has its own VIP except a MeshExternalService's, whose hostnames share one: the
// first of them (by name) stands for the others. Built on first use. Do not modify.
func (t *Table) Outbounds() []Outbound {
	if t == nil {
		return nil
	}
	t.obOnce.Do(func() { t.outbounds = buildOutbounds(t.all) })
	return t.outbounds
}

func buildOutbounds(all []*Entry) []Outbound {
	n := 0
	for _, e := range all {
		if e.Status == Available {
			n += e.numPorts()
		}
	}
	out := make([]Outbound, 0, n)
	for _, e := range all {
		if e.Status != Available {
			continue
		}
		v4, v6 := e.IPv4(), e.IPv6()
		if len(e.Targets()) > 0 {
			for _, tg := range e.Targets() {
				out = append(out, Outbound{IPv4: v4, IPv6: v6, Port: tg.Port, Hostname: e.Hostname,
					Tags: tg.Tags, Origin: tg.Origin, MeshExternalService: e.MeshExternalService(), MeshService: e.MeshService()})
			}
			continue
		}
		for i := range e.numPorts() {
			out = append(out, Outbound{IPv4: v4, IPv6: v6, Port: e.portAt(i), Hostname: e.Hostname, Tags: e.Tags(),
				Origin: e.Origin(), MeshExternalService: e.MeshExternalService(), MeshService: e.MeshService()})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if c := a.IPv4.Compare(b.IPv4); c != 0 {
			return c < 0
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Hostname < b.Hostname
	})
	dedup := out[:0]
	for i, ob := range out {
		if i > 0 && ob.IPv4 == out[i-1].IPv4 && ob.Port == out[i-1].Port {
			continue
		}
		dedup = append(dedup, ob)
	}
	return dedup
}

// MeshExternalServiceStatus returns the MeshExternalService design's status block for one MeshExternalService.
func (t *Table) MeshExternalServiceStatus(name string) (MESStatus, bool) {
	if t == nil {
		return MESStatus{}, false
	}
	s, ok := t.mes[name]
	return s, ok
}

// MeshExternalServiceStatuses returns every MeshExternalService status, by name. Do not modify.
func (t *Table) MeshExternalServiceStatuses() map[string]MESStatus {
	if t == nil {
		return nil
	}
	return t.mes
}

// Hash is a content hash of the table: equal hashes mean equal answers. It is stable within
// one process (not across processes).
func (t *Table) Hash() string {
	if t == nil {
		return ""
	}
	return t.hash
}

// NewTable builds a Table from finished entries and MES statuses. It indexes available entries
// and derives the outbound list. Used by the allocator; exported so other stages' tests can
// build small tables by hand.
func NewTable(entries []*Entry, mes map[string]MESStatus) *Table {
	all := append([]*Entry(nil), entries...)
	sortEntries(all)
	var sum [2]uint64
	for _, e := range all {
		s := entrySum(e, true)
		sum[0] += s[0]
		sum[1] += s[1]
	}
	return buildTable(netip.Prefix{}, all, nil, mes, sum)
}

// buildTable indexes all (sorted) into a fresh base. With an invalid v6 every IPv6 address
// is indexed explicitly. A VIP shared by several hostnames (a MeshExternalService's) answers
// PTR with the first of them in hostname order.
func buildTable(v6 netip.Prefix, all []*Entry, skipped []Skip, mes map[string]MESStatus, sum [2]uint64) *Table {
	t := &Table{v6: v6, all: all, skipped: skipped, mes: mes}
	b := &baseIndex{all: all}
	t.base = b
	avail := 0
	for _, e := range all {
		if e.Status == Available {
			avail++
		}
	}
	// The two indexes are built concurrently when large.
	size, shift := slotsFor(avail)
	size4, shift4 := denseSlotsFor(avail)
	b.shift, b.shift4, b.posBits = shift, shift4, uint(bits.Len(uint(len(all))))
	if avail >= parallelWork {
		both(func() { b.buildNames(size) }, func() { b.buildAddrs(size4) })
	} else {
		b.buildNames(size)
		b.buildAddrs(size4)
	}
	// The allocator's tables (valid v6) hold twins only; hand-built ones index every IPv6.
	if !v6.IsValid() {
		for _, e := range all {
			ip := e.IPv6()
			if e.Status != Available || !ip.IsValid() {
				continue
			}
			if b.other6 == nil {
				b.other6 = map[netip.Addr]*Entry{}
			}
			if _, dup := b.other6[ip]; !dup {
				b.other6[ip] = e
			}
		}
	}
	t.count = b.count
	t.hash = tableHash(sum, mes)
	return t
}

// deltaMin and deltaLimit bound the delta: past max(deltaMin, base/8) changes, the next
// table compacts them into a new base (a variable so tests can exercise both paths).
var deltaMin = 4096

func deltaLimit(base int) int { return max(deltaMin, base/8) }

// derive builds the table that follows t: all is the new entry list; names and addrs the
// index changes (nil = removed). When the delta would grow past deltaLimit the new table
// gets a fresh base instead.
func (t *Table) derive(all []*Entry, names map[string]*Entry, addrs map[uint32]*Entry,
	skipped []Skip, mes map[string]MESStatus, sum [2]uint64) *Table {
	size := len(names) + len(addrs)
	if t.delta != nil {
		size += len(t.delta.names) + len(t.delta.addrs)
	}
	if size > deltaLimit(t.base.count) {
		return buildTable(t.v6, all, skipped, mes, sum)
	}
	n := &Table{v6: t.v6, base: t.base, all: all, skipped: skipped, mes: mes, hash: tableHash(sum, mes),
		count: t.count}
	for k, v := range names {
		_, had := t.lookupName(k)
		switch {
		case v == nil && had:
			n.count--
		case v != nil && !had:
			n.count++
		}
	}
	n.delta = newIndex(size)
	if t.delta != nil {
		for k, v := range t.delta.names {
			n.delta.names[k] = v
		}
		for k, v := range t.delta.addrs {
			n.delta.addrs[k] = v
		}
	}
	for k, v := range names {
		n.delta.names[k] = v
	}
	for k, v := range addrs {
		n.delta.addrs[k] = v
	}
	return n
}

func sortEntries(all []*Entry) {
	sort.SliceStable(all, func(i, j int) bool { return entryLess(all[i], all[j]) })
}

func entryLess(a, b *Entry) bool {
	if a.Hostname != b.Hostname {
		return a.Hostname < b.Hostname
	}
	return keyLess(a, b)
}
