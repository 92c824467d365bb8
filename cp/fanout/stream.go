package fanout

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/cplink"
)

// ads is the link's server side: incremental ADS (DeltaAggregatedResources) only.
type ads struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	cp *ControlPlane
}

// StreamAggregatedResources refuses state-of-the-world requests: the link is incremental only.
func (a ads) StreamAggregatedResources(discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return status.Error(codes.Unimplemented, "kuma-cp serves incremental xDS (DeltaAggregatedResources) only")
}

// DeltaAggregatedResources serves one agent: the first request names the node (its token's
// dataplane and mesh); each kind subscribed (wildcard: every resource of the kind in the
// node's mesh) is answered once with what the agent lacks given the versions it holds, then
// with each change as it comes, one response in flight per kind (changes made while one
// waits for its ACK go out together in the next).
func (a ads) DeltaAggregatedResources(gs discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	s := &stream{cp: a.cp, gs: gs, kinds: map[string]*kindSub{}}
	s.state.id, _ = gs.Context().Value(ctxKey{}).(token.Identity)
	if p, ok := peer.FromContext(gs.Context()); ok {
		s.state.peer = p.Addr.String()
		if hl := a.cp.conns.Load(); hl != nil {
			s.state.heard = hl.heard(s.state.peer)
		}
	}
	id := a.cp.open(&s.state)
	defer func() {
		s.mu.Lock()
		s.ended = true
		for _, k := range s.kinds {
			k.t.unsubscribe(k)
			k.turn.release()
		}
		s.mu.Unlock()
		a.cp.close(id)
	}()
	// This goroutine waits for the agent's requests; the changes are sent by wake (a
	// goroutine of its own for each, once a table changed or a first sync's turn came), so
	// an idle agent costs one goroutine here, not two.
	for {
		req, err := gs.Recv()
		if err != nil {
			if gs.Context().Err() != nil || status.Code(err) == codes.Canceled || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if err = s.failed; err == nil {
			err = s.handle(req)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// stream is one agent's stream: its subscriptions, one per kind.
type stream struct {
	cp    *ControlPlane
	gs    discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	state streamState
	woken atomic.Bool // a wake is under way or due

	mu     sync.Mutex          // the fields below, and sending
	kinds  map[string]*kindSub // by type URL
	nonce  uint64
	ended  bool  // the handler returned
	failed error // a wake's send failed or the stream fell behind: returned at the next request
}

// wakeUp tells the stream that a table it follows changed or a first sync's turn came; it
// never blocks. Wakes that come while one is due are served by it.
func (s *stream) wakeUp() {
	if s.woken.CompareAndSwap(false, true) {
		go s.wake()
	}
}

// wake sends each subscription what is due: a first sync whose turn came, the changes of a
// kind with no response in flight.
func (s *stream) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.woken.Store(false) // a wake from now on runs again
	if s.ended || s.failed != nil {
		return
	}
	for _, k := range s.kinds {
		var err error
		if k.waiting {
			err = s.sendFirst(k)
		} else if k.inflight == "" {
			err = s.sendChanges(k)
		}
		if err != nil {
			s.fail(k, err)
			return
		}
	}
}

// fail ends the stream from a wake, whose goroutine cannot return from the handler: the
// handler returns err at the agent's next request. A stream whose send failed is gone (the
// handler's wait ends with it); one that is still up (it fell behind the changes) is sent
// an empty response of k's kind, which the agent answers at once.
func (s *stream) fail(k *kindSub, err error) {
	s.failed = err
	if s.gs.Context().Err() == nil {
		_ = s.send(k, nil, nil)
	}
}

func (s *stream) handle(req *discovery.DeltaDiscoveryRequest) error {
	if err := s.cp.onRequest(&s.state, req); err != nil {
		return err
	}
	typeURL := req.GetTypeUrl()
	kind := cplink.KindOf(typeURL)
	if kind == "" {
		return status.Errorf(codes.InvalidArgument, "unknown type URL %q (want %s<Kind>)", typeURL, cplink.TypeURLPrefix)
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		if n != "*" {
			return status.Errorf(codes.InvalidArgument, "%s: resource_names_subscribe %q: kuma-cp serves wildcard subscriptions only (every resource of the kind, none named)", typeURL, n)
		}
	}
	if len(req.GetResourceNamesUnsubscribe()) > 0 {
		return status.Errorf(codes.InvalidArgument, "%s: resource_names_unsubscribe %q: kuma-cp serves wildcard subscriptions only", typeURL, req.GetResourceNamesUnsubscribe())
	}
	k := s.kinds[typeURL]
	if k == nil { // a new subscription: what the agent lacks, always answered
		k = &kindSub{s: s, t: s.cp.tableFor(s.state.node.Mesh, kind)}
		s.kinds[typeURL] = k
		if len(req.GetInitialResourceVersions()) == 0 { // holds nothing: the shared full answer, in turn
			k.waiting = true
			k.turn = s.cp.first.enqueue(k.t.fullSize(s.state.gzip), s.wakeUp)
			return s.sendFirst(k)
		}
		res, removed, _ := k.t.subscribe(k, req.GetInitialResourceVersions())
		return s.send(k, res, removed)
	}
	if n := req.GetResponseNonce(); n != "" && n == k.inflight {
		k.inflight = ""
		k.turn.release()
		k.turn = nil
		return s.sendChanges(k)
	}
	return nil // a stale nonce, or a repeated subscription: nothing to answer
}

// sendChanges sends what changed in k's table since the stream was last brought up to it,
// if anything did.
func (s *stream) sendChanges(k *kindSub) error {
	from := k.seq.Load()
	if k.t.head() == from {
		return nil
	}
	res, removed, to, ok := k.t.since(from)
	if !ok {
		return status.Errorf(codes.Unavailable, "%s: this stream fell too far behind the changes; reconnect and resume with the versions held", k.t.typeURL)
	}
	k.seq.Store(to)
	if len(res) == 0 && len(removed) == 0 {
		return nil // changed and changed back
	}
	return s.send(k, res, removed)
}

func (s *stream) send(k *kindSub, res []*discovery.Resource, removed []string) error {
	nonce := s.nextNonce()
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: k.t.typeURL, Nonce: nonce, SystemVersionInfo: fmt.Sprint(k.seq.Load()),
		Resources: res, RemovedResources: removed}
	if err := s.gs.Send(resp); err != nil {
		return err
	}
	return s.sent(k, nonce)
}

// sendFirst sends k's full answer (the table's, at its newest version) once its turn has
// come; until then k is not subscribed to the table, so no change is sent before it.
func (s *stream) sendFirst(k *kindSub) error {
	if !k.turn.granted.Load() {
		return nil
	}
	k.waiting = false
	body, _ := k.t.subscribeFresh(k, s.state.gzip)
	return s.sendEncoded(k, body)
}

// sendEncoded sends a response whose body is already encoded (a table's full answer,
// shared with other streams), with this stream's nonce appended.
func (s *stream) sendEncoded(k *kindSub, body []byte) error {
	nonce := s.nextNonce()
	own, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{Nonce: nonce})
	if err != nil {
		return err
	}
	if err := s.gs.SendMsg(&preEncoded{shared: body, own: own}); err != nil {
		return err
	}
	return s.sent(k, nonce)
}

func (s *stream) nextNonce() string {
	s.nonce++
	return strconv.FormatUint(s.nonce, 10)
}

// sent records a response in flight on k until its ACK or NACK.
func (s *stream) sent(k *kindSub, nonce string) error {
	k.inflight = nonce
	s.cp.pushes.Add(1)
	return nil
}
