package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
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
	hashes  map[string]hashed // "<typeURL>/<name>" -> last hash, by resource pointer
	current *cachev3.Snapshot
	nacks   int
}

type hashed struct {
	msg  proto.Message
	hash string
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
		hashes:     map[string]hashed{},
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
func (s *Server) Update(r *Resources) error {
	if r == nil {
		return errors.New("xds: nil resources")
	}
	if err := r.Validate(); err != nil {
		s.log.Error("refusing invalid Envoy resources; keeping the last good ones", "error", err)
		return fmt.Errorf("xds: invalid resources, last good ones kept: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &cachev3.Snapshot{VersionMap: map[string]map[string]string{}}
	next := make(map[string]hashed, len(s.hashes))
	add := func(typeURL string, items []types.Resource, names []string) error {
		versions := make(map[string]string, len(items))
		withTTL := make(map[string]types.ResourceWithTTL, len(items))
		for i, m := range items {
			key := typeURL + "/" + names[i]
			h, ok := s.hashes[key]
			if !ok || h.msg != m {
				sum, err := hashResource(m)
				if err != nil {
					return fmt.Errorf("xds: %s %q: %w", typeURL, names[i], err)
				}
				h = hashed{msg: m, hash: sum}
			}
			next[key] = h
			versions[names[i]] = h.hash
			withTTL[names[i]] = types.ResourceWithTTL{Resource: m}
		}
		snap.Resources[cachev3.GetResponseType(typeURL)] = cachev3.Resources{Version: typeVersion(versions), Items: withTTL}
		snap.VersionMap[typeURL] = versions
		return nil
	}
	var errs []error
	errs = append(errs, add(resourcev3.ListenerType, toResources(r.Listeners), namesOf(r.Listeners, func(m interface{ GetName() string }) string { return m.GetName() })))
	errs = append(errs, add(resourcev3.ClusterType, toResources(r.Clusters), namesOf(r.Clusters, func(m interface{ GetName() string }) string { return m.GetName() })))
	errs = append(errs, add(resourcev3.EndpointType, toResources(r.Endpoints), namesOf(r.Endpoints, func(m interface{ GetClusterName() string }) string { return m.GetClusterName() })))
	errs = append(errs, add(resourcev3.SecretType, toResources(r.Secrets), namesOf(r.Secrets, func(m interface{ GetName() string }) string { return m.GetName() })))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Route types this server never uses still need (empty) versions.
	for _, t := range []string{resourcev3.RouteType, resourcev3.ScopedRouteType, resourcev3.VirtualHostType, resourcev3.RuntimeType, resourcev3.ExtensionConfigType, resourcev3.RateLimitConfigType} {
		snap.Resources[cachev3.GetResponseType(t)] = cachev3.Resources{Version: typeVersion(nil), Items: map[string]types.ResourceWithTTL{}}
		snap.VersionMap[t] = map[string]string{}
	}
	if err := s.cache.SetSnapshot(context.Background(), nodeKey, snap); err != nil {
		return fmt.Errorf("xds: publishing: %w", err)
	}
	s.hashes, s.current = next, snap
	s.log.Debug("published Envoy resources", "listeners", len(r.Listeners), "clusters", len(r.Clusters),
		"endpoints", len(r.Endpoints), "cds_version", snap.GetVersion(resourcev3.ClusterType), "lds_version", snap.GetVersion(resourcev3.ListenerType))
	return nil
}

func toResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
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

// typeVersion is a hash of the names and hashes of one type's resources.
func typeVersion(versions map[string]string) string {
	names := make([]string, 0, len(versions))
	for n := range versions {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(versions[n]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
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
