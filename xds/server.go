package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// nodeKey: this server feeds exactly one Envoy, so every node shares one snapshot whatever
// id it presents.
const nodeKey = "local"

type singleNode struct{}

func (singleNode) ID(*core.Node) string { return nodeKey }

// Server publishes the last valid Resources to the local Envoy over ADS (delta and state of
// the world) on a unix socket.
type Server struct {
	socketPath string
	log        *slog.Logger
	cache      cachev3.SnapshotCache
	ready      chan struct{}

	// RemovalDelay is how long the clusters and assignments an Update removes stay published
	// (make before break: go-control-plane sends CDS before LDS, so a cluster removed in the
	// same set as the listener change that stopped naming it would leave Envoy, in between,
	// with a listener naming a missing cluster). 0 means 2s; negative removes them at once.
	// Set it before the first Update.
	RemovalDelay time.Duration

	mu      sync.Mutex
	types   map[string]*typeState // by type URL: what was last published
	current *published
	nacks   int
	// last is the last valid set given to Update; buried are the clusters and assignments
	// it no longer has that stay published until their time; expiry republishes then.
	last   *Resources
	buried map[string]map[string]burial
	expiry *time.Timer
}

// burial is a removed resource still published until a time.
type burial struct {
	msg   proto.Message
	until time.Time
}

// NewServer returns a server that will listen on socketPath (at most MaxSocketPath bytes) once Run is
// called. log may be nil.
func NewServer(socketPath string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		socketPath: socketPath,
		log:        log,
		cache:      cachev3.NewSnapshotCache(true, singleNode{}, nil),
		ready:      make(chan struct{}),
	}
}

// Ready is closed once the socket accepts connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// NACKs is the number of configurations Envoy rejected since the start.
func (s *Server) NACKs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nacks
}

// Versions returns the current version of each resource type (empty before the first Update).
func (s *Server) Versions() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	if s.current == nil {
		return out
	}
	for _, t := range []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.SecretType} {
		out[t] = s.current.GetVersion(t)
	}
	return out
}

// Update validates r and, when valid, publishes it: Envoy gets only the resources whose
// content changed (delta) and each type's version changes only when its content does.
// Invalid resources are refused with the reason and the last good set stays in place.
//
// The work is proportional to what changed: the sorted resource lists are compared with the
// previous ones by identity, and only new messages are hashed.
func (s *Server) Update(r *Resources) error {
	if r == nil {
		return errors.New("xds: nil resources")
	}
	if err := r.validated(); err != nil {
		s.log.Error("refusing invalid Envoy resources; keeping the last good ones", "error", err)
		return fmt.Errorf("xds: invalid resources, last good ones kept: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.bury(resourcev3.ClusterType, asProto(r.Clusters), byName, now)
	s.bury(resourcev3.EndpointType, asProto(r.Endpoints), byClusterName, now)
	return s.publish(r, now)
}

// removalDelay is RemovalDelay with its default.
func (s *Server) removalDelay() time.Duration {
	if s.RemovalDelay == 0 {
		return 2 * time.Second
	}
	return s.RemovalDelay
}

// bury keeps the published resources of typeURL that msgs (sorted by name) no longer has
// published until the removal delay has passed.
func (s *Server) bury(typeURL string, msgs []proto.Message, nameOf func(proto.Message) string, now time.Time) {
	d := s.removalDelay()
	if d < 0 {
		return
	}
	old := s.types[typeURL]
	if old == nil {
		return
	}
	i, j := 0, 0
	for i < len(old.msgs) {
		if j < len(msgs) && old.msgs[i] == msgs[j] { // unchanged: no name compared
			i++
			j++
			continue
		}
		on := old.nameOf(old.msgs[i])
		var nn string
		if j < len(msgs) {
			nn = nameOf(msgs[j])
		}
		switch {
		case j == len(msgs) || on < nn: // removed
			if _, ok := s.buried[typeURL][on]; !ok {
				if s.buried == nil {
					s.buried = map[string]map[string]burial{}
				}
				if s.buried[typeURL] == nil {
					s.buried[typeURL] = map[string]burial{}
				}
				s.buried[typeURL][on] = burial{msg: old.msgs[i], until: now.Add(d)}
			}
			i++
		case nn < on:
			j++
		default:
			i++
			j++
		}
	}
}

// withBuried is msgs (sorted by name) with the buried resources of typeURL still due, in
// name order; a buried name msgs has again, or whose time has come, is forgotten.
func (s *Server) withBuried(typeURL string, msgs []proto.Message, nameOf func(proto.Message) string, now time.Time) []proto.Message {
	b := s.buried[typeURL]
	if len(b) == 0 {
		return msgs
	}
	type insert struct {
		at  int // position in msgs
		msg proto.Message
	}
	var extra []insert
	for name, e := range b {
		k := sort.Search(len(msgs), func(k int) bool { return nameOf(msgs[k]) >= name })
		if (k < len(msgs) && nameOf(msgs[k]) == name) || !now.Before(e.until) {
			delete(b, name)
			continue
		}
		extra = append(extra, insert{k, e.msg})
	}
	if len(extra) == 0 {
		return msgs
	}
	// A few insertions into a long sorted list: copy the runs between them.
	slices.SortFunc(extra, func(a, c insert) int {
		if a.at != c.at {
			return a.at - c.at
		}
		return strings.Compare(nameOf(a.msg), nameOf(c.msg))
	})
	out := make([]proto.Message, 0, len(msgs)+len(extra))
	from := 0
	for _, x := range extra {
		out = append(out, msgs[from:x.at]...)
		out = append(out, x.msg)
		from = x.at
	}
	return append(out, msgs[from:]...)
}

// publish makes r, with the buried resources still due, the published set, and arranges
// for the next burial to end.
func (s *Server) publish(r *Resources, now time.Time) error {
	next := map[string]*typeState{}
	var errs []error
	add := func(typeURL string, msgs []proto.Message, nameOf func(proto.Message) string) {
		st, err := s.types[typeURL].update(s.withBuried(typeURL, msgs, nameOf, now), nameOf)
		if err != nil {
			errs = append(errs, fmt.Errorf("xds: %s: %w", typeURL, err))
			return
		}
		next[typeURL] = st
	}
	add(resourcev3.ListenerType, asProto(r.Listeners), byName)
	add(resourcev3.ClusterType, asProto(r.Clusters), byName)
	add(resourcev3.EndpointType, asProto(r.Endpoints), byClusterName)
	add(resourcev3.SecretType, asProto(r.Secrets), byName)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.scheduleExpiry(now)
	snap := &published{types: next}
	if err := s.cache.SetSnapshot(context.Background(), nodeKey, snap); err != nil {
		return fmt.Errorf("xds: publishing: %w", err)
	}
	s.types, s.current, s.last = next, snap, r
	s.log.Debug("published Envoy resources", "listeners", len(r.Listeners), "clusters", len(r.Clusters),
		"endpoints", len(r.Endpoints), "cds_version", snap.GetVersion(resourcev3.ClusterType), "lds_version", snap.GetVersion(resourcev3.ListenerType))
	return nil
}

// scheduleExpiry republishes when the earliest burial ends.
func (s *Server) scheduleExpiry(now time.Time) {
	var first time.Time
	for _, b := range s.buried {
		for _, e := range b {
			if first.IsZero() || e.until.Before(first) {
				first = e.until
			}
		}
	}
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	if first.IsZero() {
		return
	}
	s.expiry = time.AfterFunc(first.Sub(now), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.last == nil {
			return
		}
		if err := s.publish(s.last, time.Now()); err != nil {
			s.log.Error("publishing the removal of unused clusters", "error", err)
		}
	})
}

// published is one published set, as the go-control-plane cache reads it. The per-type
// maps the cache asks for are built on first use only (with no Envoy connected, never).
type published struct {
	types map[string]*typeState
}

var _ cachev3.ResourceSnapshot = (*published)(nil)

func (p *published) GetVersion(typeURL string) string { return p.types[typeURL].version() }
func (p *published) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return p.types[typeURL].itemMap()
}
func (p *published) GetResources(typeURL string) map[string]types.Resource {
	return p.types[typeURL].resourceMap()
}
func (p *published) ConstructVersionMap() error { return nil }
func (p *published) GetVersionMap(typeURL string) map[string]string {
	return p.types[typeURL].versionMap()
}

// typeState is what was published for one resource type: sorted names, their messages and
// content hashes. Immutable once published; an update builds a new one, reusing the hashes
// of the messages that did not change.
type typeState struct {
	msgs   []proto.Message // sorted by name
	nameOf func(proto.Message) string
	hashes []string  // same order
	sum    [2]uint64 // XOR of mix(name, hash): the type's version, order-free

	itemsOnce, resOnce, versOnce sync.Once
	items                        map[string]types.ResourceWithTTL
	res                          map[string]types.Resource
	versions                     map[string]string
}

func (t *typeState) version() string {
	if t == nil {
		return "0"
	}
	return fmt.Sprintf("%016x%016x", t.sum[0], t.sum[1])
}

func (t *typeState) itemMap() map[string]types.ResourceWithTTL {
	if t == nil {
		return map[string]types.ResourceWithTTL{}
	}
	t.itemsOnce.Do(func() {
		t.items = make(map[string]types.ResourceWithTTL, len(t.msgs))
		for _, m := range t.msgs {
			t.items[t.nameOf(m)] = types.ResourceWithTTL{Resource: m}
		}
	})
	return t.items
}

func (t *typeState) resourceMap() map[string]types.Resource {
	if t == nil {
		return map[string]types.Resource{}
	}
	t.resOnce.Do(func() {
		t.res = make(map[string]types.Resource, len(t.msgs))
		for _, m := range t.msgs {
			t.res[t.nameOf(m)] = m
		}
	})
	return t.res
}

func (t *typeState) versionMap() map[string]string {
	if t == nil {
		return map[string]string{}
	}
	t.versOnce.Do(func() {
		t.versions = make(map[string]string, len(t.msgs))
		for i, m := range t.msgs {
			t.versions[t.nameOf(m)] = t.hashes[i]
		}
	})
	return t.versions
}

// update returns the state for msgs (sorted by name), reusing t when nothing changed and
// hashing only the messages that are new.
func (t *typeState) update(msgs []proto.Message, nameOf func(proto.Message) string) (*typeState, error) {
	if t == nil {
		t = &typeState{}
	}
	if len(msgs) == len(t.msgs) {
		same := true
		for i := range msgs {
			if msgs[i] != t.msgs[i] {
				same = false
				break
			}
		}
		if same {
			return t, nil
		}
	}
	n := &typeState{msgs: msgs, nameOf: nameOf, hashes: make([]string, len(msgs)), sum: t.sum}
	add := func(j int, old string) error {
		h, err := hashResource(msgs[j])
		if err != nil {
			return fmt.Errorf("%q: %w", nameOf(msgs[j]), err)
		}
		n.hashes[j] = h
		if h != old {
			if old != "" {
				n.xor(nameOf(msgs[j]), old)
			}
			n.xor(nameOf(msgs[j]), h)
		}
		return nil
	}
	i, j := 0, 0
	for i < len(t.msgs) || j < len(msgs) {
		if i < len(t.msgs) && j < len(msgs) && msgs[j] == t.msgs[i] { // unchanged: no name compared
			n.hashes[j] = t.hashes[i]
			i++
			j++
			continue
		}
		var on, nn string
		if i < len(t.msgs) {
			on = t.nameOf(t.msgs[i])
		}
		if j < len(msgs) {
			nn = nameOf(msgs[j])
		}
		switch {
		case j == len(msgs) || (i < len(t.msgs) && on < nn): // removed
			n.xor(on, t.hashes[i])
			i++
		case i == len(t.msgs) || nn < on: // added
			if err := add(j, ""); err != nil {
				return nil, err
			}
			j++
		default: // same name, new message
			if err := add(j, t.hashes[i]); err != nil {
				return nil, err
			}
			i++
			j++
		}
	}
	return n, nil
}

func byName(m proto.Message) string {
	return m.(interface{ GetName() string }).GetName()
}

func byClusterName(m proto.Message) string {
	return m.(interface{ GetClusterName() string }).GetClusterName()
}

func (t *typeState) xor(name, hash string) {
	sum := sha256.Sum256([]byte(name + "\x00" + hash))
	t.sum[0] ^= binary.LittleEndian.Uint64(sum[0:8])
	t.sum[1] ^= binary.LittleEndian.Uint64(sum[8:16])
}

func asProto[T proto.Message](in []T) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

var marshal = proto.MarshalOptions{Deterministic: true}

// hashResource is a content hash: equal content, equal hash, on every run.
func hashResource(m proto.Message) (string, error) {
	b, err := marshal.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}

// Run serves ADS on the unix socket until ctx is cancelled. A stale socket file left by a
// previous run is removed; the socket is removed again on return.
func (s *Server) Run(ctx context.Context) error {
	if len(s.socketPath) > MaxSocketPath {
		return fmt.Errorf("xds: socket path %q is %d bytes, unix sockets allow %d", s.socketPath, len(s.socketPath), MaxSocketPath)
	}
	if err := removeStaleSocket(s.socketPath); err != nil {
		return err
	}
	lis, err := net.Listen("unix", s.socketPath)
	if err != nil {
		return fmt.Errorf("xds: listening on %s: %w", s.socketPath, err)
	}
	defer os.Remove(s.socketPath)
	if err := os.Chmod(s.socketPath, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("xds: %w", err)
	}

	// The xDS server's context must end before GracefulStop: open ADS streams only finish
	// when it does, and GracefulStop waits for them.
	srvCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	xs := serverv3.NewServer(srvCtx, s.cache, s.callbacks())
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	close(s.ready)
	s.log.Info("xDS server listening", "socket", s.socketPath)

	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("xds: serving: %w", err)
	}
	cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-stopped
	}
	<-errc
	return nil
}

// removeStaleSocket removes a socket file left by a run that did not clean up. A socket
// another process still accepts on, or a file that is not a socket, is left alone: an error.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("xds: socket path: %w", err)
	}
	if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("xds: socket path %s exists and is not a socket (mode %s); not removing it", path, st.Mode())
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("xds: socket %s is in use: another process serves on it (another kuma-dp with the same work dir?)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("xds: removing stale socket: %w", err)
	}
	return nil
}

func (s *Server) callbacks() serverv3.Callbacks {
	nack := func(typeURL, nonce string, detail string) {
		s.mu.Lock()
		s.nacks++
		s.mu.Unlock()
		s.log.Warn("Envoy rejected a configuration (NACK)", "type", typeURL, "nonce", nonce, "error", detail)
	}
	return serverv3.CallbackFuncs{
		StreamDeltaRequestFunc: func(_ int64, req *discovery.DeltaDiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				nack(req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
			}
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				nack(req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
			}
			return nil
		},
	}
}
