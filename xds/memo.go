package xds

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// Generator is Generate with a memory: a resource whose inputs did not change since the
// previous call is the same (already validated, already hashed) message, so a model change
// costs what it changes rather than the whole mesh. Safe for concurrent use; calls are
// serialized.
type Generator struct {
	mu    sync.Mutex
	state *genState
	trust *trustStore
	// full and partial count the generations of each kind (tests and benchmarks).
	full, partial int
}

// NewGenerator returns a Generator with an empty memory.
func NewGenerator() *Generator { return &Generator{trust: newTrustStore()} }

// Generate is the package-level Generate, reusing what the previous call built.
func (gen *Generator) Generate(s *mesh.Snapshot, t *vipalloc.Table, o Options) (*Resources, error) {
	gen.mu.Lock()
	defer gen.mu.Unlock()
	if s == nil || s.Self == nil {
		return nil, fmt.Errorf("xds: snapshot has no dataplane")
	}
	o = o.withDefaults()
	if r, ok := gen.state.incremental(s, t, o, gen.trust); ok {
		gen.partial++
		return r, nil
	}
	gen.full++
	var prev map[memoKey]memoEntry
	if gen.state != nil {
		prev = gen.state.memo
	}
	g := newGenerator(s, t, o)
	routeProblems := len(g.problems)
	g.prev, g.next, g.st, g.trust = prev, make(map[memoKey]memoEntry, len(prev)), newTracking(), gen.trust
	g.run()
	r := g.finish()
	r.trust = gen.trust
	gen.state = newState(g, r, routeProblems)
	gen.trust.keepOnly(g.next)
	return r, nil
}

type memoKind uint8

const (
	memoListener memoKind = iota
	memoCluster
	memoEndpoints
)

type memoKey struct {
	kind memoKind
	name string
}

// memoEntry is a built message and the signature of the inputs it was built from.
type memoEntry struct {
	sig string
	msg proto.Message
}

// trustStore remembers the messages that passed validation (and the clusters each listener
// names), so Validate checks only new messages. Messages are never mutated once returned.
type trustStore struct {
	mu sync.RWMutex
	ok map[proto.Message][]string
}

func newTrustStore() *trustStore { return &trustStore{ok: map[proto.Message][]string{}} }

func (t *trustStore) get(m proto.Message) ([]string, bool) {
	if t == nil {
		return nil, false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	refs, ok := t.ok[m]
	return refs, ok
}

func (t *trustStore) put(m proto.Message, refs []string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.ok[m] = refs
	t.mu.Unlock()
}

func (t *trustStore) forget(m proto.Message) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.ok, m)
	t.mu.Unlock()
}

// keepOnly forgets messages the current generation no longer uses.
func (t *trustStore) keepOnly(live map[memoKey]memoEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := make(map[proto.Message]bool, len(live))
	for _, e := range live {
		keep[e.msg] = true
	}
	for m := range t.ok {
		if !keep[m] {
			delete(t.ok, m)
		}
	}
}

// proxySpec is what an outbound's filter is built from: a tcp_proxy, or the
// http_connection_manager of a route's HTTP rules.
type proxySpec struct {
	stat   string
	single string
	split  []weighted
	// hashSource: the route's load balancer hashes (ringHash, maglev), on the client's
	// address, the one key a TCP connection has.
	hashSource bool
	// http: the route's HTTP rules, for an outbound to an HTTP service (httproute.go); nil
	// for a tcp_proxy.
	http *httpSpec
	// kuma: the routes of Kuma's MeshHTTPRoutes (meshhttp.go); nil for others.
	kuma *kumaHTTPSpec
}

// writeSplit writes split to a signature, each cluster=weight after sep.
func writeSplit(b *strings.Builder, sep byte, split []weighted) {
	for _, w := range split {
		b.WriteByte(sep)
		b.WriteString(w.cluster)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(uint64(w.weight), 10))
	}
}

func (p proxySpec) sig() string {
	var b strings.Builder
	b.WriteString(p.stat)
	b.WriteByte('|')
	b.WriteString(p.single)
	writeSplit(&b, '|', p.split)
	if p.hashSource {
		b.WriteString("|hash")
	}
	if p.http != nil {
		p.http.sig(&b)
	}
	if p.kuma != nil {
		b.WriteString("|kuma:")
		b.WriteString(p.kuma.sig)
	}
	return b.String()
}
