package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
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

	mu      sync.Mutex
	types   map[string]*typeState // by type URL: what was last published
	current *cachev3.Snapshot
	nacks   int
}

// NewServer returns a server that will listen on socketPath (at most 107 bytes) once Run is
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
	next := map[string]*typeState{}
	var errs []error
	add := func(typeURL string, msgs []proto.Message, names []string) {
		st, err := s.types[typeURL].update(msgs, names)
		if err != nil {
			errs = append(errs, fmt.Errorf("xds: %s: %w", typeURL, err))
			return
		}
		next[typeURL] = st
	}
	add(resourcev3.ListenerType, asProto(r.Listeners), namesOf(r.Listeners, func(m interface{ GetName() string }) string { return m.GetName() }))
	add(resourcev3.ClusterType, asProto(r.Clusters), namesOf(r.Clusters, func(m interface{ GetName() string }) string { return m.GetName() }))
	add(resourcev3.EndpointType, asProto(r.Endpoints), namesOf(r.Endpoints, func(m interface{ GetClusterName() string }) string { return m.GetClusterName() }))
	add(resourcev3.SecretType, asProto(r.Secrets), namesOf(r.Secrets, func(m interface{ GetName() string }) string { return m.GetName() }))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	snap := &cachev3.Snapshot{VersionMap: map[string]map[string]string{}}
	for t, st := range next {
		snap.Resources[cachev3.GetResponseType(t)] = cachev3.Resources{Version: st.version(), Items: st.items}
		snap.VersionMap[t] = st.versions
	}
	// Types this server never uses still need (empty) versions.
	for _, t := range []string{resourcev3.RouteType, resourcev3.ScopedRouteType, resourcev3.VirtualHostType, resourcev3.RuntimeType, resourcev3.ExtensionConfigType, resourcev3.RateLimitConfigType} {
		snap.Resources[cachev3.GetResponseType(t)] = cachev3.Resources{Version: (&typeState{}).version(), Items: map[string]types.ResourceWithTTL{}}
		snap.VersionMap[t] = map[string]string{}
	}
	if err := s.cache.SetSnapshot(context.Background(), nodeKey, snap); err != nil {
		return fmt.Errorf("xds: publishing: %w", err)
	}
	s.types, s.current = next, snap
	s.log.Debug("published Envoy resources", "listeners", len(r.Listeners), "clusters", len(r.Clusters),
		"endpoints", len(r.Endpoints), "cds_version", snap.GetVersion(resourcev3.ClusterType), "lds_version", snap.GetVersion(resourcev3.ListenerType))
	return nil
}

// typeState is what was published for one resource type. Its maps are handed to the cache
// and never modified afterwards: an update clones them.
type typeState struct {
	names    []string        // sorted
	msgs     []proto.Message // same order
	items    map[string]types.ResourceWithTTL
	versions map[string]string // name -> content hash
	sum      [2]uint64         // XOR of mix(name, hash): the type's version, order-free
}

func (t *typeState) version() string {
	if t == nil {
		return "0"
	}
	return fmt.Sprintf("%016x%016x", t.sum[0], t.sum[1])
}

// update returns the state for msgs/names (sorted by name), reusing t's when nothing changed
// and touching only the differences otherwise.
func (t *typeState) update(msgs []proto.Message, names []string) (*typeState, error) {
	if t == nil {
		t = &typeState{items: map[string]types.ResourceWithTTL{}, versions: map[string]string{}}
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
	n := &typeState{names: names, msgs: msgs, items: maps.Clone(t.items), versions: maps.Clone(t.versions), sum: t.sum}
	set := func(name string, m proto.Message) error {
		h, err := hashResource(m)
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		if old, ok := n.versions[name]; ok {
			n.xor(name, old)
		}
		n.xor(name, h)
		n.versions[name] = h
		n.items[name] = types.ResourceWithTTL{Resource: m}
		return nil
	}
	i, j := 0, 0
	for i < len(t.names) || j < len(names) {
		switch {
		case j == len(names) || (i < len(t.names) && t.names[i] < names[j]): // removed
			n.xor(t.names[i], n.versions[t.names[i]])
			delete(n.versions, t.names[i])
			delete(n.items, t.names[i])
			i++
		case i == len(t.names) || names[j] < t.names[i]: // added
			if err := set(names[j], msgs[j]); err != nil {
				return nil, err
			}
			j++
		default: // same name
			if msgs[j] != t.msgs[i] {
				if err := set(names[j], msgs[j]); err != nil {
					return nil, err
				}
			}
			i++
			j++
		}
	}
	return n, nil
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

func namesOf[T any, I any](in []T, name func(I) string) []string {
	out := make([]string, len(in))
	for i, m := range in {
		out[i] = name(any(m).(I))
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
	if len(s.socketPath) > 107 {
		return fmt.Errorf("xds: socket path %q is %d bytes, unix sockets allow 107", s.socketPath, len(s.socketPath))
	}
	if err := os.Remove(s.socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("xds: removing stale socket: %w", err)
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
