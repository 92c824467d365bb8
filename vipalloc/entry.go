package vipalloc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"unsafe"

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
// A mesh holds an entry per hostname (and the allocator a candidate embedding one), so an
// entry is kept small (40 bytes, so that a candidate fits the 48-byte size class): its
// hostname, addresses, ports, tags, origin and key are read with methods of those names. The IPv4 VIP
// is a uint32 and the IPv6 one its twin in the allocator's twin prefix; a single port is held
// inline; the tags are a pointer to the first of them, one unless the flags say their count
// is in the detail (a default name's are always one, {kuma.io/service: svc}; a policy
// tuple's count is its selector's, in the detail its tuples share); a default name's origin
// {"Service", svc} and key `Service{kuma.io/service=svc}` are derived from its tags, its
// hostname `svc.mesh` too when svc is lower-case (the tag's string and ".mesh": no string of
// its own), and so is
// a policy tuple's key `<policy>{k1=v1,...}` when it spells exactly the tuple's tags. The
// rest is behind one pointer to a detail shared by many entries: the twin prefix, a policy's
// origin, and what few entries have (a key that is not derived, a reason, a
// MeshExternalService, a selector, several ports' targets). All the default names of an
// allocator share one detail, a policy's tuples their selector's. Build an entry by hand
// with NewEntry.
type Entry struct {
	// hostname is the hostname (see Hostname), lower-case, without the final dot ("" for a
	// skip); with svcHost, the first part of it: a default name's service, the string its
	// tag holds, before ".mesh".
	hostname string
	// What an A answer reads comes next to the hostname, in its cache line.
	v4     uint32
	port   uint16 // the port, with onePort; several ports (or one above 65535) are in detail
	Status Status
	flags  entryFlags
	// tags is the first of the destination tags the hostname routes to (the tuple; see
	// Tags): nil for none.
	tags   *mesh.Tag
	detail *entryDetail // nil: no detail (no IPv6; the origin is zero or, see flags, derived)
}

type entryFlags uint8

const (
	hasV4     entryFlags = 1 << iota // v4 is the IPv4 VIP
	onePort                          // port is the only port
	svcOrigin                        // the origin is {"Service", the kuma.io/service tag}
	svcKey                           // the key is defaultKey(the kuma.io/service tag)
	policyKey                        // the key is tagsKey(the origin's name, the tags)
	tagCount                         // the tags are detail.ntags from tags, not one
	published                        // (a candidate's own entry) published as is: see publish
	svcHost                          // the hostname is hostname (the service's tag) + ".mesh": see host
)

// Hostname is the hostname, lower-case, without the final dot ("" for a skip). A default
// name's, `<service>.mesh` for a service already lower-case, is built on each call: compare
// and hash it with host.
func (e *Entry) Hostname() string { return e.host().String() }

// AppendHostname appends the hostname to b (what Hostname returns, without building it).
func (e *Entry) AppendHostname(b []byte) []byte { return e.host().appendTo(b) }

// host is the entry's hostname without building it: a default name of a lower-case service
// keeps no string of it (at 100,000 services, 1.6 MB less), only the service's, its tag's.
func (e *Entry) host() hostName {
	if e.flags&svcHost != 0 {
		return hostName{head: e.hostname, tail: meshSuffix}
	}
	return hostName{head: e.hostname}
}

// hasHost reports whether the entry has a hostname (a skip has none).
func (e *Entry) hasHost() bool { return e.hostname != "" }

// setHostname sets the hostname of an entry being built.
func (e *Entry) setHostname(h string) {
	e.hostname = h
	e.flags &^= svcHost
}

// setServiceHost makes an entry being built show the hostname `svc.mesh` of svc, a
// lower-case service: svc is its tag's string (the entry keeps no string of its own).
func (e *Entry) setServiceHost(svc string) {
	e.hostname = svc
	e.flags |= svcHost
}

// entryDetail is the part of entries many share: an allocator's default names all of it,
// a policy's tuples their selector's. A copy is made for what one entry has alone (a
// reason - every candidate that loses its hostname has one -, a multi-port entry's targets,
// a hand-built entry's IPv6), so what fewer still have is behind rare.
type entryDetail struct {
	// twin is the twin prefix: the IPv6 VIP of an entry with an IPv4 one is it with the
	// IPv4 VIP in the low 32 bits. Nil (no twin) for hand-built entries, which have an ip6.
	twin *netip.Prefix
	rare *entryRare
	// src is the source of the candidate that proposed the entry (nil for the default
	// names' defaultSource); entries themselves never read it.
	src    *source
	origin Origin
	// key is the entry's key when it is not derived (see Key): a skip's, a
	// MeshExternalService's or MeshService's, a hand-built entry's.
	key                 string
	reason              string
	meshExternalService string
	meshService         string
	selector            mesh.Tags
	targets             []Target
	// ntags is how many tags the entries with tagCount have.
	ntags uint32
}

// entryRare holds what only hand-built and multi-port entries have. Never written once set:
// withRare makes a new one.
type entryRare struct {
	ip6   netip.Addr // a hand-built entry's IPv6 (the allocator's have twins)
	ports []uint32   // when not a single port that fits the entry
}

// withRare sets d's rare part to a copy of it that f changed (none when empty).
func (d *entryDetail) withRare(f func(r *entryRare)) {
	var r entryRare
	if d.rare != nil {
		r = *d.rare
	}
	f(&r)
	d.rare = nil
	if r.ip6.IsValid() || r.ports != nil {
		d.rare = &r
	}
}

// ports returns the ports kept in d (nil when the entry's single port is in the entry).
func (d *entryDetail) ports() []uint32 {
	if d.rare == nil {
		return nil
	}
	return d.rare.ports
}

// EntryData is an entry spelled out: what NewEntry builds one from, what Data returns, and
// its JSON (the /vips and /config_dump shape). IPv4 and IPv6 are zero (invalid) when Status
// is NotAvailable.
type EntryData struct {
	Hostname string     `json:"hostname"`
	IPv4     netip.Addr `json:"ipv4"`
	IPv6     netip.Addr `json:"ipv6"`
	Ports    []uint32   `json:"ports"`
	// Origin is the winning origin.
	Origin Origin    `json:"origin"`
	Key    string    `json:"key"`
	Tags   mesh.Tags `json:"tags"`
	Status Status    `json:"status"`
	// Reason says why the entry is NotAvailable.
	Reason string `json:"reason,omitempty"`
	// MeshExternalService names the resource for MeshExternalService hostnames (VIPs from
	// the external pool); empty otherwise.
	MeshExternalService string `json:"meshExternalService,omitempty"`
	// MeshService names the resource for MeshService hostnames (VIPs from the MeshService
	// pool); empty otherwise.
	MeshService string `json:"meshService,omitempty"`
	// Selector is the selector of the policy that produced the entry (for --explain); nil
	// for default service names and MeshExternalService hostnames.
	Selector mesh.Tags `json:"selector,omitempty"`
	// Targets says, for a hostname served on several ports, what each port routes to (sorted
	// by port). Nil when the entry has a single port: Origin, Key and Tags then apply.
	Targets []Target `json:"targets,omitempty"`
}

// NewEntry builds the entry d spells out. IPv4 is an IPv4 address or invalid.
func NewEntry(d EntryData) *Entry {
	e := &Entry{hostname: d.Hostname, Status: d.Status}
	if d.IPv4.IsValid() {
		e.v4, e.flags = v4u(d.IPv4), hasV4
	}
	det := entryDetail{origin: d.Origin, key: d.Key, reason: d.Reason, meshExternalService: d.MeshExternalService, meshService: d.MeshService,
		selector: d.Selector, targets: d.Targets}
	e.refTags(&det, d.Tags)
	det.withRare(func(r *entryRare) { r.ip6 = d.IPv6 })
	e.setPorts(&det, d.Ports)
	e.setDetail(det)
	return e
}

// Data spells the entry out.
func (e *Entry) Data() EntryData {
	d := e.detailCopy()
	return EntryData{Hostname: e.Hostname(), IPv4: e.IPv4(), IPv6: e.IPv6(), Ports: e.Ports(), Origin: d.origin,
		Key: e.Key(), Tags: e.Tags(), Status: e.Status, Reason: d.reason, MeshExternalService: d.meshExternalService, MeshService: d.meshService,
		Selector: d.selector, Targets: d.targets}
}

// Tags are the destination tags the hostname routes to (the tuple), sorted by key. Do not
// modify.
func (e *Entry) Tags() mesh.Tags {
	switch {
	case e.tags == nil:
		return nil
	case e.flags&tagCount != 0:
		return unsafe.Slice(e.tags, e.detail.ntags)
	}
	return unsafe.Slice(e.tags, 1)
}

// noTags is what the tags of an entry with an empty (not nil) tag set point to.
var noTags mesh.Tag

// refTags makes an entry being built, whose detail will be d, show tags t: one inline, any
// other count (none included: not nil, so that JSON tells {} from null) in d.
func (e *Entry) refTags(d *entryDetail, t mesh.Tags) {
	e.flags &^= tagCount
	switch {
	case t == nil:
		e.tags = nil
		return
	case len(t) == 0:
		e.tags = &noTags
	default:
		e.tags = &t[0]
	}
	if len(t) != 1 {
		e.flags |= tagCount
		d.ntags = uint32(len(t))
	}
}

// setTags sets the tags of an entry being built, keeping the rest of its detail (a shared
// detail with another tag count is copied, never written).
func (e *Entry) setTags(t mesh.Tags) {
	if len(t) == 1 || t == nil || e.detail != nil && e.detail.ntags == uint32(len(t)) {
		var d entryDetail
		e.refTags(&d, t)
		return
	}
	d := e.detailCopy()
	e.refTags(&d, t)
	e.setDetail(d)
}

// setPorts sets the ports of an entry being built whose detail will be d.
func (e *Entry) setPorts(d *entryDetail, ports []uint32) {
	e.flags &^= onePort
	e.port = 0
	one := len(ports) == 1 && ports[0] <= 0xffff
	if one {
		e.port, e.flags = uint16(ports[0]), e.flags|onePort
	}
	if one && d.ports() == nil {
		return
	}
	d.withRare(func(r *entryRare) {
		r.ports = ports
		if one {
			r.ports = nil
		}
	})
}

// setPort sets the single port of an entry being built.
func (e *Entry) setPort(p uint32) {
	if p <= 0xffff {
		e.port, e.flags = uint16(p), e.flags|onePort
		return
	}
	d := e.detailCopy()
	e.setPorts(&d, []uint32{p})
	e.setDetail(d)
}

// setVIP sets the VIP of an entry being built (its twin comes with its detail): v, or none.
func (e *Entry) setVIP(v uint32, hasVIP bool) {
	e.v4 = 0
	e.flags &^= hasV4
	if hasVIP {
		e.v4, e.flags = v, e.flags|hasV4
	}
}

// sameVIP reports whether the entry shows VIP v, or none.
func (e *Entry) sameVIP(v uint32, hasVIP bool) bool {
	if !hasVIP {
		return e.flags&hasV4 == 0
	}
	return e.flags&hasV4 != 0 && e.v4 == v
}

// IPv4 is the IPv4 VIP (invalid when the entry has none).
func (e *Entry) IPv4() netip.Addr {
	if e.flags&hasV4 == 0 {
		return netip.Addr{}
	}
	return u4(e.v4)
}

// IPv6 is the IPv6 VIP, the twin of the IPv4 one in the allocator's entries (invalid when
// the entry has none).
func (e *Entry) IPv6() netip.Addr {
	switch {
	case e.detail == nil:
		return netip.Addr{}
	case e.detail.rare != nil && e.detail.rare.ip6.IsValid():
		return e.detail.rare.ip6
	case e.flags&hasV4 != 0 && e.detail.twin != nil && e.detail.twin.IsValid():
		return twin(*e.detail.twin, e.v4)
	}
	return netip.Addr{}
}

// Ports are the ports the hostname is served on (a single port is returned in a new slice).
func (e *Entry) Ports() []uint32 {
	if e.flags&onePort != 0 {
		return []uint32{uint32(e.port)}
	}
	if e.detail == nil {
		return nil
	}
	return e.detail.ports()
}

// numPorts and portAt read the ports without building a slice.
func (e *Entry) numPorts() int {
	if e.flags&onePort != 0 {
		return 1
	}
	if e.detail == nil {
		return 0
	}
	return len(e.detail.ports())
}

func (e *Entry) portAt(i int) uint32 {
	if e.flags&onePort != 0 {
		return uint32(e.port)
	}
	return e.detail.ports()[i]
}

// Key is `<policy>{k1=v1,k2=v2}` (the VirtualHost draft). A derived one (a default name's,
// most policy tuples') is built on each call: compare with keyIs, write with appendKey.
func (e *Entry) Key() string {
	switch {
	case e.flags&svcKey != 0:
		return defaultKey(e.service())
	case e.flags&policyKey != 0:
		var buf [128]byte
		return string(e.appendKey(buf[:0]))
	}
	return e.storedKey()
}

// storedKey is the key of an entry whose key is not derived ("" for one that is).
func (e *Entry) storedKey() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.key
}

// setKey sets the stored key of an entry being built, keeping the rest of its detail (a
// shared detail is copied, never written).
func (e *Entry) setKey(k string) {
	if k == e.storedKey() {
		return
	}
	d := e.detailCopy()
	d.key = k
	e.setDetail(d)
}

// derivedKey is set in flags when the key is not stored.
const derivedKey = svcKey | policyKey

// appendTagsKey appends `<name>{k1=v1,...}` for tags (a policy tuple's key when none of its
// tags is missing).
func appendTagsKey(b []byte, name string, tags mesh.Tags) []byte {
	return tags.AppendText(append(b, name...))
}

// service is the entry's kuma.io/service tag ("" without one).
func (e *Entry) service() string {
	svc, _ := e.Tags().Get(mesh.ServiceTag)
	return svc
}

// defaultKeyPrefix and defaultKey spell the key of the default name of service svc.
const defaultKeyPrefix = defaultKeyName + "{" + mesh.ServiceTag + "="

func defaultKey(svc string) string { return defaultKeyPrefix + svc + "}" }

// appendKey appends the entry's key to b.
func (e *Entry) appendKey(b []byte) []byte {
	switch {
	case e.flags&svcKey != 0:
		return append(append(append(b, defaultKeyPrefix...), e.service()...), '}')
	case e.flags&policyKey != 0:
		return appendTagsKey(b, e.detail.origin.Name, e.Tags())
	}
	return append(b, e.storedKey()...)
}

// keyLess reports whether a's key sorts before b's, without building derived keys on the
// heap (hostnames proposed by a default name and a policy sort their entries by key).
func keyLess(a, b *Entry) bool {
	if (a.flags|b.flags)&derivedKey == 0 {
		return a.storedKey() < b.storedKey()
	}
	var ba, bb [128]byte
	return bytes.Compare(a.appendKey(ba[:0]), b.appendKey(bb[:0])) < 0
}

// keyIs reports whether e's key is k, without building a derived one on the heap.
func keyIs[K string | []byte](e *Entry, k K) bool {
	switch {
	case e.flags&derivedKey == 0:
		return e.storedKey() == string(k)
	case e.flags&policyKey != 0:
		var buf [128]byte
		return string(e.appendKey(buf[:0])) == string(k)
	}
	svc, n := e.service(), len(defaultKeyPrefix)
	return len(k) == n+len(svc)+1 && string(k[:n]) == defaultKeyPrefix && string(k[n:len(k)-1]) == svc &&
		k[len(k)-1] == '}'
}

// Origin is the winning origin.
func (e *Entry) Origin() Origin {
	if e.flags&svcOrigin != 0 {
		return Origin{Kind: OriginService, Name: e.service()}
	}
	if e.detail == nil {
		return Origin{}
	}
	return e.detail.origin
}

// setOriginOf makes an entry being built whose detail will be d show origin o: a default
// name's origin is derived from its tags, any other is kept in the detail.
func (e *Entry) setOriginOf(d *entryDetail, o Origin) {
	e.flags &^= svcOrigin
	d.origin = o
	if svc, ok := e.Tags().Get(mesh.ServiceTag); ok && o == (Origin{Kind: OriginService, Name: svc}) {
		e.flags |= svcOrigin
		d.origin = Origin{}
	}
}

// setDetail sets e's detail (its origin included) to d: none when d has nothing to keep.
// Only for an entry being built.
func (e *Entry) setDetail(d entryDetail) {
	e.detail = &d // the tags' count may be in it: the origin is derived from them
	e.setOriginOf(&d, d.origin)
	if e.flags&tagCount == 0 && d.twin == nil && d.rare == nil && d.src == nil && d.origin == (Origin{}) && d.key == "" &&
		d.reason == "" && d.meshExternalService == "" && d.meshService == "" && d.selector == nil && d.targets == nil {
		e.detail = nil
	}
}

// setReason sets the reason of an entry being built, keeping the rest of its detail (a
// shared detail is copied, never written).
func (e *Entry) setReason(r string) {
	if r == e.Reason() {
		return
	}
	d := e.detailCopy()
	d.reason = r
	e.setDetail(d)
}

// setKeyReason sets both (one copy of the detail).
func (e *Entry) setKeyReason(k, r string) {
	d := e.detailCopy()
	d.key, d.reason = k, r
	e.setDetail(d)
}

// detailCopy returns a copy of the entry's detail, with its origin (zero when it has none).
func (e *Entry) detailCopy() entryDetail {
	if e.detail == nil {
		return entryDetail{origin: e.Origin()}
	}
	d := *e.detail
	d.origin = e.Origin()
	return d
}

// Reason says why the entry is NotAvailable ("" when it is available).
func (e *Entry) Reason() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.reason
}

// MeshExternalService names the resource of a MeshExternalService hostname ("" otherwise).
func (e *Entry) MeshExternalService() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.meshExternalService
}

// MeshService names the resource of a MeshService hostname ("" otherwise).
func (e *Entry) MeshService() string {
	if e.detail == nil {
		return ""
	}
	return e.detail.meshService
}

// vipOwner is the key of the resource whose VIP the entry shows: "mes/<name>" for a
// MeshExternalService's hostnames, "ms/<name>" for a MeshService's (their hostnames share
// it); "" for a hostname holding its own VIP.
func (e *Entry) vipOwner() string {
	switch {
	case e.detail == nil:
		return ""
	case e.detail.meshExternalService != "":
		return mesKeyPrefix + e.detail.meshExternalService
	case e.detail.meshService != "":
		return msKeyPrefix + e.detail.meshService
	}
	return ""
}

// Selector is the selector of the policy that produced the entry (for --explain); nil for
// default service names and MeshExternalService hostnames.
func (e *Entry) Selector() mesh.Tags {
	if e.detail == nil {
		return nil
	}
	return e.detail.selector
}

// Targets says, for a hostname served on several ports, what each port routes to (sorted by
// port); nil when the entry has a single port.
func (e *Entry) Targets() []Target {
	if e.detail == nil {
		return nil
	}
	return e.detail.targets
}

// MarshalJSON writes the entry spelled out (EntryData).
func (e Entry) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.Data())
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var d EntryData
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	*e = *NewEntry(d)
	return nil
}
