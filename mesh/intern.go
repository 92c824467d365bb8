package mesh

import (
	"hash/maphash"
	"strings"
	"sync"
	"unsafe"
	"weak"
)

// The parts of a Dataplane that most dataplanes of a mesh have with the same content - an
// inbound's state and health, the transparent proxying settings, the admin port, the
// probes: Kuma writes all of them on every Dataplane of a Kubernetes mesh - are shared
// between the dataplanes that have them equal, once decoded (settle): one object each
// instead of one per dataplane. Shared parts are never modified (nothing in the agent
// writes a decoded resource). The tables only grow, so each is capped: past maxInterned
// distinct values, a value is kept as decoded, not shared.
const maxInterned = 1024

type internTable[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*V
}

// get returns the shared value for k, making it a copy of v the first time; v itself when
// the table is full.
func (t *internTable[K, V]) get(k K, v *V) *V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.m[k]; ok {
		return s
	}
	if len(t.m) >= maxInterned {
		return v
	}
	if t.m == nil {
		t.m = make(map[K]*V)
	}
	c := *v
	t.m[k] = &c
	return &c
}

type inboundExtraKey struct {
	state  string
	health int8 // 0: none, 1: ready, 2: not ready
}

type tpKey struct {
	in, out, inV6              uint32
	ipFamily                   string
	direct, reachable, backend string
}

type networkingKey struct {
	tp             *TransparentProxying // shared already
	advertised     string
	gateway, admin string
}

type keptKey struct {
	metrics, probes, modified string
}

var (
	sharedReady    = &InboundHealth{Ready: true}
	sharedNotReady = &InboundHealth{Ready: false}

	inboundExtras internTable[inboundExtraKey, InboundExtra]
	tps           internTable[tpKey, TransparentProxying]
	networkings   internTable[networkingKey, NetworkingExtra]
	kepts         internTable[keptKey, DataplaneKept]
	metaExtras    internTable[*DataplaneKept, MetaExtra]
)

// tagKeys holds the process's one copy of each tag key (up to maxInterned of them): a
// mesh's tag keys are few (Kuma's, and its pods' label keys) and repeat on every
// dataplane, and dataplanes decoded apart - a file each, or one at a time from the control
// plane - held a copy each (a Kubernetes dataplane's keys are ~150 bytes).
var tagKeys internStrings

// internStrings is a capped table of strings, each held once.
type internStrings struct {
	mu sync.Mutex
	m  map[string]string
}

// get returns the table's copy of s, made now if the table is not full; false when it is
// full and does not hold s.
func (t *internStrings) get(s string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.m[s]; ok {
		return c, true
	}
	if len(t.m) >= maxInterned {
		return "", false
	}
	if t.m == nil {
		t.m = make(map[string]string)
	}
	c := strings.Clone(s)
	t.m[c] = c
	return c, true
}

// sharedHealth is the shared InboundHealth equal to h (nil for nil).
func sharedHealth(h *InboundHealth) *InboundHealth {
	switch {
	case h == nil:
		return nil
	case h.Ready:
		return sharedReady
	}
	return sharedNotReady
}

// sharedInboundExtra is x shared with the inbounds that have the same state and health,
// when x holds nothing else (otherwise x).
func sharedInboundExtra(x *InboundExtra) *InboundExtra {
	if x.Address != "" || x.ServiceAddress != "" || x.Name != "" || len(x.ServiceProbe) > 0 {
		return x
	}
	k := inboundExtraKey{state: x.State}
	if x.Health != nil {
		k.health = 2
		if x.Health.Ready {
			k.health = 1
		}
	}
	return inboundExtras.get(k, x)
}

// sharedNetworkingExtra is x shared with the dataplanes whose networking extras are equal,
// when x has no outbounds (each dataplane's own); its transparent proxying is shared first.
func sharedNetworkingExtra(x *NetworkingExtra) *NetworkingExtra {
	if len(x.Outbound) > 0 {
		return x
	}
	if tp := x.TransparentProxying; tp != nil {
		x.TransparentProxying = tps.get(tpKey{in: tp.RedirectPortInbound, out: tp.RedirectPortOutbound,
			inV6: tp.RedirectPortInboundV6, ipFamily: tp.IPFamilyMode, direct: string(tp.DirectAccessServices),
			reachable: strings.Join(tp.ReachableServices, "\x00"), backend: string(tp.ReachableBackends)}, tp)
	}
	return networkings.get(networkingKey{tp: x.TransparentProxying, advertised: x.AdvertisedAddress,
		gateway: string(x.Gateway), admin: string(x.Admin)}, x)
}

// sharedMetaExtra is x shared with the dataplanes whose MetaExtra holds nothing but the same
// kept fields (shared first: sharedKept), x itself when it holds labels or a creation time
// (each dataplane's own).
func sharedMetaExtra(x *MetaExtra) *MetaExtra {
	if x.MetaLabels != nil || !x.MetaCreationTime.IsZero() || x.DataplaneKept == nil {
		return x
	}
	return metaExtras.get(x.DataplaneKept, x)
}

// sharedKept is k shared with the dataplanes whose kept fields are equal.
func sharedKept(k *DataplaneKept) *DataplaneKept {
	return kepts.get(keptKey{metrics: string(k.Metrics), probes: string(k.Probes), modified: k.ModificationTime}, k)
}

// A set shared through liveSets has minLiveSet to maxLiveSet tags, and no instanceTag: a
// Kubernetes pod's inbound has 8 or more (256 bytes or more), where an entry (~50 bytes)
// pays as soon as two replicas share it; a universal dataplane's one or two tags (32 or 64
// bytes) do not, nor a set no other pod has (Kuma tags the inbounds of a headless
// Service's pods, a StatefulSet's, with the pod's name).
const (
	minLiveSet  = 4
	maxLiveSet  = 255 // the low byte of an entry's key is the set's length
	instanceTag = "kuma.io/instance"
)

// liveShareable reports whether t may be shared through liveSets.
func liveShareable(t Tags) bool {
	return len(t) >= minLiveSet && len(t) <= maxLiveSet && !t.Has(instanceTag)
}

// liveHash is the key in liveSets of the set of n tags whose text (setText) is b.
func liveHash(b []byte, n int) uint64 {
	return maphash.Bytes(liveSets.seed, b)&^maxLiveSet | uint64(n)
}

// liveSets holds the tag sets of dataplanes decoded alone, by their content's hash, weakly
// (a set no dataplane holds any more is collected, and its entry dropped later): the
// replicas of a workload sent one at a time by the control plane share one set as a file's
// replicas do (tagSets).
var liveSets = liveSetTable{seed: maphash.MakeSeed()}

type liveSetTable struct {
	mu   sync.Mutex
	seed maphash.Seed
	// m holds each set's first tag, weakly, by its content's hash, whose low byte is
	// replaced by the set's length.
	m     map[uint64]weak.Pointer[Tag]
	prune int // the map's size at which the entries of collected sets are dropped
}

// lookup returns the live set equal to t, or nil (none held, or t not shareable).
func (l *liveSetTable) lookup(t Tags) Tags {
	if !liveShareable(t) {
		return nil
	}
	var buf [512]byte
	return l.find(liveHash(setText(buf[:0], t), len(t)), t)
}

// find returns the live set of hash h equal to t, or nil.
func (l *liveSetTable) find(h uint64, t Tags) Tags {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.m[h].Value()
	if p == nil {
		return nil
	}
	if c := Tags(unsafe.Slice(p, h&maxLiveSet)); c.Equal(t) {
		return c
	}
	return nil // another set of the same hash
}

// add holds m as the set of hash h, and drops the entries of collected sets once the map
// has doubled since the last time.
func (l *liveSetTable) add(h uint64, m Tags) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[uint64]weak.Pointer[Tag])
	}
	l.m[h] = weak.Make(&m[0])
	if len(l.m) < l.prune {
		return
	}
	for k, p := range l.m {
		if p.Value() == nil {
			delete(l.m, k)
		}
	}
	l.prune = max(2*len(l.m), 1024)
}
