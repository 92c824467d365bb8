package vipalloc

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/tagset"
)

// candidate is one (hostname, port) a source proposes, or - with host empty - a tuple that
// produced no hostname (a skip, with reason). Candidates are counted: refs is how many
// inbounds of the mesh support them, so a dataplane coming or going adjusts counts only.
type candidate struct {
	// Entry is the proposal: Hostname, port (one), origin, Key, Tags, selector and
	// MeshExternalService (reason for skips); its detail names the source. The first time
	// the candidate is published it is published as is (&c.Entry, with its VIP and status
	// filled in, and the published flag set), so most hostnames cost one object; after that
	// it is never changed, only copied.
	Entry
	refs int32
}

// isPublished reports whether the candidate's own entry was published (see publish).
func (c *candidate) isPublished() bool { return c.flags&published != 0 }

// source is what proposed the candidate: its policy's, or defaultSource.
func (c *candidate) source() *source {
	if c.detail == nil || c.detail.src == nil {
		return defaultSource
	}
	return c.detail.src
}

func (c *candidate) port() uint32 {
	if c.numPorts() == 0 {
		return 0
	}
	return c.portAt(0)
}

// defaultSource is the source of every default name (their origins are in their entries).
var defaultSource = &source{}

// source is what produced a candidate, and what orders candidates of different origins
// (see better). Shared by the candidates of one policy.
type source struct {
	origin   Origin
	explicit bool // a policy (VirtualOutbound, HostnameGenerator), not a default name
	created  time.Time
}

// better orders candidates for the same hostname and port: an explicit policy beats a
// default `<service>.mesh` name, then the older creation time wins (so a new policy never
// takes a name that is already served), then origin kind, origin name and key, so the order
// is total and deterministic.
func better(a, b *candidate) bool {
	as, bs := a.source(), b.source()
	if as.explicit != bs.explicit {
		return as.explicit
	}
	if !as.created.Equal(bs.created) {
		return as.created.Before(bs.created)
	}
	if ao, bo := a.Origin(), b.Origin(); ao != bo {
		if ao.Kind != bo.Kind {
			return ao.Kind < bo.Kind
		}
		return ao.Name < bo.Name
	}
	return keyLess(&a.Entry, &b.Entry)
}

func compareCandidates(a, b *candidate) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// vipKey is the key a candidate's VIP is allocated under: its hostname, or the
// MeshExternalService (one VIP per MeshExternalService, shared by its hostnames).
func (c *candidate) vipKey() string {
	if o := c.vipOwner(); o != "" {
		return o
	}
	return c.Hostname
}

// The keys of the VIPs held by resources (their hostnames share them): a
// MeshExternalService's, from the external pool, and a MeshService's, from its own.
const (
	mesKeyPrefix = "mes/"
	msKeyPrefix  = "ms/"
)

// expander turns inbound tags into candidates for one source: a VirtualOutbound, or the
// default service names.
type expander struct {
	name string // the key prefix: policy name, or defaultKeyName
	src  *source
	twin *netip.Prefix // the allocator's twin prefix, in its candidates' details
	// detail is the detail of every default name (the twin prefix only).
	detail *entryDetail
	vo     *mesh.VirtualOutbound
	tpl    *hostname.VOTemplate
	sels   []compiledSel
	sidx   *selIndex // nil: few selectors, scanned
	broken string    // compile error: the policy yields a single skip
	// cands holds the expander's candidates by key, but for the default names only those
	// without a hostname (skips): a default name with one is found through the allocator's
	// hostname states (hosts; nothing writes them while expanders run) or, until placed,
	// in fresh. That saves a map entry per hostname of the mesh.
	cands candMap
	fresh candMap
	hosts *[hostShards]hostMap
	buf   []byte
	hbuf  []byte    // a default name's hostname, being looked up
	tbuf  mesh.Tags // a policy tuple's tags, being built
	kbuf  []byte    // a policy tuple's key as its tags spell it
	// events are the candidates this expander added (add) and dropped since they were last
	// applied: expanders run concurrently and their events are applied in a fixed order.
	events []event
	// last is a two-entry cache of the latest candidates: dataplanes come sorted by name,
	// and neighbours usually share a tuple, so most visits skip the map.
	last  [2]*candidate
	lastI int
	// defaults only:
	isDefault   bool
	defaultPort uint32
	svcIdx      int
}

type event struct {
	c     *candidate
	h     uint64 // hostHash of the hostname
	add   bool
	shard int8 // the hostname's shard (hostHash % hostShards); -1 for a skip
}

func (x *expander) emit(c *candidate, add bool) {
	ev := event{c: c, add: add, shard: -1}
	if c.Hostname != "" {
		ev.h = hostHash(c.Hostname)
		ev.shard = int8(ev.h % hostShards)
	}
	x.events = append(x.events, ev)
}

// lookup finds the candidate of key b; h is keyHash(b) when c is nil (for cands.put).
func (x *expander) lookup(b []byte) (c *candidate, h uint64) {
	for _, c := range x.last {
		if c != nil && keyIs(&c.Entry, b) {
			return c, 0
		}
	}
	h = keyHash(b)
	c = x.find(h, b)
	if c != nil {
		x.remember(c)
	}
	return c, h
}

// find returns the live candidate of key b (hashing to h), or nil.
func (x *expander) find(h uint64, b []byte) *candidate {
	if c := x.cands.get(h, b); c != nil || !x.isDefault {
		return c
	}
	if c := x.fresh.get(h, b); c != nil {
		return c
	}
	return x.placedDefault(b)
}

func isASCII(b []byte) bool {
	for _, ch := range b {
		if ch >= 0x80 {
			return false
		}
	}
	return true
}

// placedDefault returns the placed, live default name candidate of key b
// (`Service{kuma.io/service=svc}`), found through the state of its hostname, or nil.
func (x *expander) placedDefault(b []byte) *candidate {
	svc := b[len(defaultKeyPrefix) : len(b)-1]
	// The hostname as visitDefault spells it: strings.ToLower, done in place for ASCII.
	hb := x.hbuf[:0]
	if isASCII(svc) {
		for _, ch := range svc {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			hb = append(hb, ch)
		}
	} else {
		hb = append(hb, strings.ToLower(string(svc))...)
	}
	hb = append(hb, ".mesh"...)
	x.hbuf = hb
	hh := keyHash(hb)
	hs := findHost(&x.hosts[hh%hostShards], hh, hb)
	if hs == nil {
		return nil
	}
	for _, c := range hs.cands() {
		if c.refs > 0 && c.source() == defaultSource && keyIs(&c.Entry, b) {
			return c
		}
	}
	return nil
}

func (x *expander) remember(c *candidate) {
	x.last[x.lastI] = c
	x.lastI ^= 1
}

func (x *expander) forget(c *candidate) {
	for i := range x.last {
		if x.last[i] == c {
			x.last[i] = nil
		}
	}
}

// defaultKeyName prefixes the keys of default `<service>.mesh` candidates.
const defaultKeyName = "Service"

type compiledSel struct {
	detail        *entryDetail // {origin: the policy's, selector: the selector's tags}, shared by its candidates
	match         []kv
	nTags, nExact int
	dest          []dest // sorted by key
}

type kv struct {
	k, v string
	wild bool
	idx  int // in the round's key table (see inbound)
}

// dest is one destination tag of a tuple: a fixed value (from the selector) or the inbound's.
type dest struct {
	k, fixed    string
	fromInbound bool
	idx         int
}

// sameVO reports whether two versions of a VirtualOutbound expand the same way.
func sameVO(a, b *mesh.VirtualOutbound) bool {
	return a == b || a.CreationTime().Equal(b.CreationTime()) && reflect.DeepEqual(a.Selectors, b.Selectors) &&
		reflect.DeepEqual(a.Conf, b.Conf)
}

// visit applies one inbound (delta +1 when it appears, -1 when it goes) to the expander's
// candidates, emitting new and dropped candidates as events.
func (x *expander) visit(in *inbound) {
	delta := in.delta
	if x.isDefault {
		x.visitDefault(in)
		return
	}
	if x.broken != "" {
		x.visitBroken(in, delta)
		return
	}
	best := x.bestSelector(in)
	if best < 0 {
		return
	}
	sel := &x.sels[best]
	b, missing := appendSelKey(append(x.buf[:0], x.name...), sel, in)
	x.buf = b
	c, h := x.lookup(b)
	if c != nil || delta < 0 {
		x.count(c, delta)
		return
	}
	c = x.newCandidate(sel, in, missing)
	c.refs = delta
	x.cands.put(h, c)
	x.remember(c)
	x.emit(c, true)
}

// appendSelKey appends to b the key part of a candidate of sel for in: {k=v,...} over the
// selector's destination tags, "<missing>" (and missing true) for a tag in lacks.
func appendSelKey(b []byte, sel *compiledSel, in *inbound) (_ []byte, missing bool) {
	b = append(b, '{')
	for i, d := range sel.dest {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d.k...)
		b = append(b, '=')
		if !d.fromInbound {
			b = append(b, d.fixed...)
			continue
		}
		v, ok := in.get(d.k, d.idx)
		if !ok {
			missing = true
			b = append(b, "<missing>"...)
			continue
		}
		b = append(b, v...)
	}
	return append(b, '}'), missing
}

// newCandidate is the candidate of sel for in, its key the one in x.buf: its tags, and its
// hostname and port rendered from them (or the reason it has none).
func (x *expander) newCandidate(sel *compiledSel, in *inbound, missing bool) *candidate {
	b := x.buf
	c := &candidate{}
	c.detail = sel.detail // it holds len(sel.dest), the count of the tags of a tuple none lacks
	tags := x.tbuf[:0]
	var absent []string
	for _, d := range sel.dest {
		switch v, ok := in.get(d.k, d.idx); {
		case !d.fromInbound:
			tags = append(tags, mesh.Tag{Key: d.k, Value: d.fixed})
		case ok:
			tags = append(tags, mesh.Tag{Key: d.k, Value: v})
		default:
			absent = append(absent, d.k)
		}
	}
	tags = tagset.Sorted(tags)
	x.tbuf = tags
	c.setTags(inboundRun(in.tags, tags))
	keyLen := len(b)
	// Rendered with the tags present, as Kuma does: a tag the inbound lacks fails only a
	// template that needs it (a parameter the template never uses, or one it tolerates the
	// absence of with {{if}}, skips nothing). The hostname is rendered after the key in the
	// same buffer: one string holds both.
	out, port, err := x.tpl.RenderAppend(b, tags)
	derived := false
	if err == nil && !missing {
		x.kbuf = appendTagsKey(x.kbuf[:0], x.name, tags)
		derived = string(x.kbuf) == string(out[:keyLen])
	}
	switch {
	case err != nil && missing:
		c.setKeyReason(string(b), fmt.Sprintf("inbound tags lack %s, needed by the host/port template", quoteList(absent)))
	case err != nil:
		c.setKeyReason(string(b), err.Error())
	case derived:
		// The key spells the tags (it does unless one is missing): derived, not stored.
		x.buf = out
		c.Hostname, c.flags = string(out[keyLen:]), c.flags|policyKey
		c.setPort(port)
	default:
		x.buf = out
		kh := string(out)
		c.Hostname = kh[keyLen:]
		c.setKey(kh[:keyLen])
		c.setPort(port)
	}
	return c
}

// inboundRun returns a tuple's tags (sorted) as its candidate keeps them: the run of in, the
// inbound's own tags, that holds them when there is one (always for a tuple of the one tag
// it takes from the inbound, kuma.io/service most often; tag sets are never modified once
// decoded), else a set of their own.
func inboundRun(in, tags mesh.Tags) mesh.Tags {
	if len(tags) > 0 {
		for i := range in {
			if in[i].Key == tags[0].Key {
				if run := in[i:min(i+len(tags), len(in))]; slices.Equal(run, tags) {
					return run
				}
				break
			}
		}
	}
	return slices.Clone(tags)
}

func (x *expander) count(c *candidate, delta int32) {
	if c == nil {
		return // an inbound that was never counted: nothing to undo
	}
	c.refs += delta
	if c.refs <= 0 {
		if x.isDefault && c.Hostname != "" {
			// A placed one leaves its hostname's state when its removal is applied.
			if x.fresh.len() > 0 {
				x.fresh.del(c)
			}
		} else {
			x.cands.del(c)
		}
		x.forget(c)
		x.emit(c, false)
	}
}

func (x *expander) visitDefault(in *inbound) {
	delta := in.delta
	svc, ok := in.get(mesh.ServiceTag, x.svcIdx)
	if !ok || svc == "" {
		return
	}
	b := append(x.buf[:0], defaultKeyPrefix...)
	b = append(b, svc...)
	b = append(b, '}')
	x.buf = b
	c, h := x.lookup(b)
	if c != nil || delta < 0 {
		x.count(c, delta)
		return
	}
	c = &candidate{refs: delta}
	c.detail = x.detail
	// The origin {"Service", svc} and the key (b) are derived from the tags: a name costs
	// the string of its hostname only.
	c.tags, c.flags = defaultTag(in.tags, svc), svcOrigin|svcKey
	keyLen := len(b)
	b = append(append(b, strings.ToLower(svc)...), ".mesh"...)
	x.buf = b
	host := string(b[keyLen:])
	if err := hostname.Valid(host); err != nil {
		c.setReason(fmt.Sprintf("default name %q: %v", host, err))
		x.cands.put(h, c)
	} else {
		c.Hostname = host
		c.setPort(x.defaultPort)
		if x.fresh.byHash == nil {
			x.fresh = newCandMap(0)
		}
		x.fresh.put(h, c)
	}
	x.remember(c)
	x.emit(c, true)
}

// defaultTag is the one tag of a default name, {kuma.io/service: svc}: the inbound's own
// (tag sets are never modified once decoded; an entry's tags are a pointer to the first and
// their count, so a one-tag set can be any one tag of the inbound's), so that the name costs
// no tag set of its own, whatever other tags the inbound has.
func defaultTag(in mesh.Tags, svc string) *mesh.Tag {
	for i := range in {
		if in[i] == (mesh.Tag{Key: mesh.ServiceTag, Value: svc}) {
			return &in[i]
		}
	}
	return &mesh.Tag{Key: mesh.ServiceTag, Value: svc}
}

// visitBroken keeps one skip for a policy whose templates do not compile, counted by the
// inbounds its selectors match.
func (x *expander) visitBroken(in *inbound, delta int32) {
	if x.bestSelector(in) < 0 {
		return
	}
	key := append(x.buf[:0], x.name+"{}"...)
	x.buf = key
	h := keyHash(key)
	if c := x.cands.get(h, key); c != nil || delta < 0 {
		x.count(c, delta)
		return
	}
	c := &candidate{refs: delta}
	c.setDetail(entryDetail{twin: x.twin, src: x.src, origin: x.src.origin, key: string(key), reason: x.broken})
	x.cands.put(h, c)
	x.emit(c, true)
}

// removeAll drops every candidate of the expander (the policy went away or changed, or for
// the default names, the mesh did).
func (x *expander) removeAll(r *round) {
	x.cands.each(r.remove)
	x.cands = newCandMap(0)
	x.last = [2]*candidate{}
	if !x.isDefault {
		return
	}
	var placed []*candidate
	for i := range x.hosts {
		x.hosts[i].each(func(hs *hostState) {
			for _, c := range hs.cands() {
				if c.source() == defaultSource {
					placed = append(placed, c)
				}
			}
		})
	}
	for _, c := range placed {
		r.remove(c)
	}
	x.fresh = candMap{}
}

func quoteList(ks []string) string {
	q := make([]string, len(ks))
	for i, k := range ks {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}
