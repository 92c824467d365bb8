package fanout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kumadp/kuma-dp/cplink"
)

// table is what one mesh's agents are served of one kind: each resource with the sequence
// number of its last change, and a log of the changes in order. A stream holds the sequence
// number it was brought up to; what it is sent next is read from the log after that number
// (the changed names only), so one change costs the agents subscribed work in proportion to
// what changed, never to the resources of the kind.
type table struct {
	typeURL string

	mu      sync.RWMutex
	seq     uint64            // the last change's sequence number
	entries map[string]*entry // the resources served
	gone    map[string]uint64 // removed names -> the removal's sequence number, while the log holds it
	log     []change          // in sequence order; complete for every change after floor
	floor   uint64
	subs    map[*kindSub]struct{}
	// full is the first answer of a fresh subscription (every resource) encoded at one
	// sequence number; built again on demand once it lags too far behind (fullCurrent).
	full *fullSync
	// fullBuilds and gzipBuilds count the encodings of full and its compressions (tests: one
	// per version, whatever the streams).
	fullBuilds, gzipBuilds int
}

// fullSync is a table's whole content at one sequence number, encoded once as the body of a
// DeltaDiscoveryResponse and sent as it is by every stream that subscribes afresh at that
// number (a fleet reconnecting costs the control plane one encoding per mesh and kind), and
// compressed once, when an agent that takes it compressed first asks (cplink.GzipResponse).
type fullSync struct {
	seq  uint64
	body []byte
	gz   []byte
}

// entry is one resource as sent: built once per change, shared by every stream.
type entry struct {
	body []byte
	seq  uint64
	res  *discovery.Resource
}

type change struct {
	seq  uint64
	name string
}

func newTable(kind string) *table {
	return &table{typeURL: cplink.TypeURL(kind), entries: map[string]*entry{}, gone: map[string]uint64{},
		subs: map[*kindSub]struct{}{}}
}

// resourceVersion is a resource's version on the link: the SHA-256 (hex) of its envelope's
// deterministic encoding, so equal content has an equal version on every replica and across
// restarts (and the same as go-control-plane's caches computed, so agents resume across an
// upgrade without a resend).
func resourceVersion(env []byte) string {
	sum := sha256.Sum256(env)
	return hex.EncodeToString(sum[:])
}

func newEntry(typeURL, name string, body []byte, seq uint64) *entry {
	env := cplink.Envelope(body)
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(env) // a BytesValue always marshals
	return &entry{body: body, seq: seq, res: &discovery.Resource{Name: name, Version: resourceVersion(raw),
		Resource: &anypb.Any{TypeUrl: typeURL, Value: raw}}}
}

// sync makes the table serve want, logging only what differs, and wakes the streams
// subscribed when anything did.
func (t *table) sync(want map[string][]byte) (updated, removed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, body := range want {
		if e, ok := t.entries[name]; ok && bytes.Equal(e.body, body) {
			continue
		}
		t.seq++
		t.entries[name] = newEntry(t.typeURL, name, body, t.seq)
		delete(t.gone, name)
		t.log = append(t.log, change{t.seq, name})
		updated++
	}
	for name := range t.entries {
		if _, ok := want[name]; !ok {
			t.seq++
			delete(t.entries, name)
			t.gone[name] = t.seq
			t.log = append(t.log, change{t.seq, name})
			removed++
		}
	}
	if updated+removed == 0 {
		return 0, 0
	}
	t.compactLocked()
	for k := range t.subs {
		k.s.wakeUp()
	}
	return updated, removed
}

// compactLocked drops the log's changes that every stream has (and, when a stream stalls
// far behind, more: that stream is then told to reconnect and resume with what it holds).
func (t *table) compactLocked() {
	live := len(t.entries)
	if len(t.log) <= 2*live+1024 {
		return
	}
	upTo := t.seq
	for k := range t.subs {
		upTo = min(upTo, k.seq.Load())
	}
	if len(t.log) > 8*live+65536 { // a stalled stream does not hold the log forever
		upTo = max(upTo, t.log[len(t.log)/2].seq)
	}
	if upTo <= t.floor {
		return
	}
	i := sort.Search(len(t.log), func(i int) bool { return t.log[i].seq > upTo })
	for _, c := range t.log[:i] {
		if g, ok := t.gone[c.name]; ok && g == c.seq {
			delete(t.gone, c.name)
		}
	}
	t.log = append([]change(nil), t.log[i:]...)
	t.floor = upTo
}

// head is the table's last sequence number.
func (t *table) head() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.seq
}

// since is what changed after sequence number from: the resources to send and the names
// removed, and the sequence number they bring the stream to; ok is false when the log no
// longer reaches back to from (the stream must resume afresh).
func (t *table) since(from uint64) (res []*discovery.Resource, removed []string, to uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if from < t.floor {
		return nil, nil, t.seq, false
	}
	i := sort.Search(len(t.log), func(i int) bool { return t.log[i].seq > from })
	for _, c := range t.log[i:] {
		// Only a name's last change counts: its current entry or removal carries that change's number.
		if e, ok := t.entries[c.name]; ok {
			if e.seq == c.seq {
				res = append(res, e.res)
			}
		} else if g, ok := t.gone[c.name]; ok && g == c.seq {
			removed = append(removed, c.name)
		}
	}
	return res, removed, t.seq, true
}

// subscribe adds s and returns what it lacks given the versions it holds (every resource
// whose version differs, every name held that is gone) and the sequence number that brings
// it to: a resumed stream is sent nothing unchanged.
func (t *table) subscribe(k *kindSub, held map[string]string) (res []*discovery.Resource, removed []string, to uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs[k] = struct{}{}
	for name, e := range t.entries {
		if held[name] != e.res.Version {
			res = append(res, e.res)
		}
	}
	for name := range held {
		if _, ok := t.entries[name]; !ok {
			removed = append(removed, name)
		}
	}
	k.seq.Store(t.seq)
	return res, removed, t.seq
}

// subscribeFresh adds k, a subscription that holds nothing, and returns the encoded answer
// it needs (every resource: the table's full encoding, shared; compressed when gz) and the
// sequence number that brings it to: the changes after it are sent next, as to any stream.
func (t *table) subscribeFresh(k *kindSub, gz bool) (body []byte, to uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs[k] = struct{}{}
	body = t.fullLocked(gz)
	k.seq.Store(t.full.seq)
	return body, t.full.seq
}

// fullSize is the size of the answer a fresh subscription would be sent now.
func (t *table) fullSize(gz bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fullLocked(gz))
}

// fullLocked is the table's full answer, built (and compressed) once per version while it
// is current enough (fullCurrent).
func (t *table) fullLocked(gz bool) []byte {
	if !t.fullCurrentLocked() {
		t.full = &fullSync{seq: t.seq, body: t.encodeAllLocked()}
		t.fullBuilds++
	}
	if !gz {
		return t.full.body
	}
	if t.full.gz == nil {
		t.full.gz = cplink.GzipResponse(t.full.body, t.typeURL, strconv.FormatUint(t.full.seq, 10))
		t.gzipBuilds++
	}
	return t.full.gz
}

// fullCurrentLocked reports whether the full answer built last still serves: the log
// reaches back to it and the changes since are at most an eighth of the resources (and at
// least 64). A mesh that changes while its agents reconnect (a rolling restart writes
// Dataplanes) then costs one encoding and compression per eighth of the mesh changed, not
// one per change; each agent is sent the changes since after its ACK, as any stream.
func (t *table) fullCurrentLocked() bool {
	if t.full == nil || t.full.seq < t.floor {
		return false
	}
	return t.seq-t.full.seq <= max(64, uint64(len(t.entries))/8)
}

// encodeAllLocked is the wire form of a response carrying every resource, by name, at the
// table's sequence number (the nonce is the stream's, appended when sent).
func (t *table) encodeAllLocked() []byte {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	res := make([]*discovery.Resource, len(names))
	for i, n := range names {
		res[i] = t.entries[n].res
	}
	b, _ := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: t.typeURL,
		SystemVersionInfo: strconv.FormatUint(t.seq, 10), Resources: res}) // made of marshalled parts: cannot fail
	return b
}

func (t *table) unsubscribe(k *kindSub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, k)
}

// resources is the table's content, name -> envelope body (for tests and diagnostics).
func (t *table) resources() map[string][]byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string][]byte, len(t.entries))
	for n, e := range t.entries {
		out[n] = e.body
	}
	return out
}

// kindSub is one stream's subscription to one kind.
type kindSub struct {
	s        *stream
	t        *table
	seq      atomic.Uint64 // what the stream was brought up to
	inflight string        // the nonce of the response not yet ACKed or NACKed
	// turn is the first sync's place in the queue, then its share of the budget, held
	// until the full answer is ACKed; waiting: the subscription's full answer waits its turn.
	turn    *turn
	waiting bool
}
