package vipalloc

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/mesh"
)

// Status of an entry, as the MeshExternalService design's status block spells it (its text
// is what JSON and the CLI show). One byte: a mesh holds an entry per hostname.
type Status uint8

const (
	Available Status = iota + 1
	NotAvailable
)

var statusText = [...]string{"", "Available", "NotAvailable"}

// String is the status as the MeshExternalService design spells it ("" for the zero value).
func (s Status) String() string {
	if int(s) < len(statusText) {
		return statusText[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// MarshalText writes the status as its text.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status from its text.
func (s *Status) UnmarshalText(b []byte) error {
	for i, t := range statusText {
		if string(b) == t {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("status %q: not Available or NotAvailable", b)
}

// Origin is what produced a hostname: {kind, name} of a policy, or {"Service", svc} for the
// default `<service>.mesh` names.
type Origin struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Origin kinds besides the mesh resource kinds.
const OriginService = "Service"

// Entry is one hostname of the table. Entries are shared between tables and never mutated.
//
// What few entries have (a reason, a MeshExternalService, a selector, several ports'
// targets) is behind one pointer, read with the methods of the same names: a mesh holds an
// entry per hostname, and most are a default name or a policy's tuple with none of them.
// Build one with those fields through NewEntry.
type Entry struct {
	// Hostname is lower-case, without the final dot.
	Hostname string
	// IPv4 and IPv6 are zero (invalid) when Status is NotAvailable.
	IPv4  netip.Addr
	IPv6  netip.Addr
	Ports []uint32
	// Origin is the winning origin; Key is `<policy>{k1=v1,k2=v2}` (the VirtualHost draft).
	Origin Origin
	Key    string
	// Tags are the destination tags the hostname routes to (the tuple).
	Tags   mesh.Tags
	Status Status
	detail *EntryDetail
}

// EntryDetail holds what few entries have.
type EntryDetail struct {
	// Reason says why the entry is NotAvailable.
	Reason string
	// MeshExternalService names the resource for MeshExternalService hostnames (VIPs from
	// the external pool); empty otherwise.
	MeshExternalService string
	// Selector is the selector of the policy that produced the entry (for --explain); nil
	// for default service names and MeshExternalService hostnames.
	Selector mesh.Tags
	// Targets says, for a hostname served on several ports, what each port routes to (sorted
	// by port). Nil when the entry has a single port: Origin, Key and Tags then apply.
	Targets []Target
}

// NewEntry returns e with detail d (nil when d has nothing).
func NewEntry(e Entry, d EntryDetail) *Entry {
	e.setDetail(d)
	return &e
}

func (d *EntryDetail) empty() bool {
	return d.Reason == "" && d.MeshExternalService == "" && d.Selector == nil && d.Targets == nil
}

// setDetail sets e's detail to d (none when d has nothing). Only for an entry being built.
func (e *Entry) setDetail(d EntryDetail) {
	if d.empty() {
		e.detail = nil
		return
	}
	e.detail = &d
}

// setReason sets the reason of an entry being built, keeping the rest of its detail (a
// shared detail is copied, never written).
func (e *Entry) setReason(r string) {
	if r == e.Reason() {
		return
	}
	d := e.Detail()
	d.Reason = r
	e.setDetail(d)
}

// Detail returns a copy of the entry's detail (zero when it has none).
func (e *Entry) Detail() EntryDetail {
	if e.detail == nil {
		return EntryDetail{}
	}
	return *e.detail
}

// Reason says why the entry is NotAvailable ("" when it is available).
func (e *Entry) Reason() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.Reason
}

// MeshExternalService names the resource of a MeshExternalService hostname ("" otherwise).
func (e *Entry) MeshExternalService() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.MeshExternalService
}

// Selector is the selector of the policy that produced the entry (for --explain); nil for
// default service names and MeshExternalService hostnames.
func (e *Entry) Selector() mesh.Tags {
	if e.detail == nil {
		return nil
	}
	return e.detail.Selector
}

// Targets says, for a hostname served on several ports, what each port routes to (sorted by
// port); nil when the entry has a single port.
func (e *Entry) Targets() []Target {
	if e.detail == nil {
		return nil
	}
	return e.detail.Targets
}

// entryJSON is an Entry's JSON (the /vips and /config_dump shape).
type entryJSON struct {
	Hostname            string     `json:"hostname"`
	IPv4                netip.Addr `json:"ipv4"`
	IPv6                netip.Addr `json:"ipv6"`
	Ports               []uint32   `json:"ports"`
	Origin              Origin     `json:"origin"`
	Key                 string     `json:"key"`
	Tags                mesh.Tags  `json:"tags"`
	Status              Status     `json:"status"`
	Reason              string     `json:"reason,omitempty"`
	MeshExternalService string     `json:"meshExternalService,omitempty"`
	Selector            mesh.Tags  `json:"selector,omitempty"`
	Targets             []Target   `json:"targets,omitempty"`
}

// MarshalJSON writes the entry with its detail's fields beside the others.
func (e Entry) MarshalJSON() ([]byte, error) {
	d := e.Detail()
	return json.Marshal(entryJSON{Hostname: e.Hostname, IPv4: e.IPv4, IPv6: e.IPv6, Ports: e.Ports, Origin: e.Origin,
		Key: e.Key, Tags: e.Tags, Status: e.Status, Reason: d.Reason, MeshExternalService: d.MeshExternalService,
		Selector: d.Selector, Targets: d.Targets})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j entryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Entry{Hostname: j.Hostname, IPv4: j.IPv4, IPv6: j.IPv6, Ports: j.Ports, Origin: j.Origin, Key: j.Key,
		Tags: j.Tags, Status: j.Status}
	e.setDetail(EntryDetail{Reason: j.Reason, MeshExternalService: j.MeshExternalService, Selector: j.Selector, Targets: j.Targets})
	return nil
}

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
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' {
			return t.lookupName(strings.ToLower(name))
		}
	}
	return nil, false
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
		if e, ok := t.lookupV4(v4); ok && e.IPv6 == ip {
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
			n += len(e.Ports)
		}
	}
	out := make([]Outbound, 0, n)
	for _, e := range all {
		if e.Status != Available {
			continue
		}
		if len(e.Targets()) > 0 {
			for _, tg := range e.Targets() {
				out = append(out, Outbound{IPv4: e.IPv4, IPv6: e.IPv6, Port: tg.Port, Hostname: e.Hostname,
					Tags: tg.Tags, Origin: tg.Origin, MeshExternalService: e.MeshExternalService()})
			}
			continue
		}
		for _, p := range e.Ports {
			out = append(out, Outbound{IPv4: e.IPv4, IPv6: e.IPv6, Port: p, Hostname: e.Hostname, Tags: e.Tags,
				Origin: e.Origin, MeshExternalService: e.MeshExternalService()})
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
	b.shift = shift
	if avail >= parallelWork {
		both(func() { b.buildNames(size) }, func() { b.buildAddrs(size) })
	} else {
		b.buildNames(size)
		b.buildAddrs(size)
	}
	// The allocator's tables (valid v6) hold twins only; hand-built ones index every IPv6.
	if !v6.IsValid() {
		for _, e := range all {
			if e.Status != Available || !e.IPv6.IsValid() {
				continue
			}
			if b.other6 == nil {
				b.other6 = map[netip.Addr]*Entry{}
			}
			if _, dup := b.other6[e.IPv6]; !dup {
				b.other6[e.IPv6] = e
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
	return a.Key < b.Key
}
