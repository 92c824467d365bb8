// Package fanout is the control plane's side of the link to agents: the delta ADS server
// (go-control-plane, one cache per mesh and kind so an agent only ever sees its mesh), token
// checks on every stream, the served resources (Served) and the Feed that keeps them in step
// with the store. It never decodes files or writes the store.
package fanout

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/cplink"
)

// ControlPlane serves the store's resources over incremental ADS: one go-control-plane
// LinearCache per mesh and kind (so an agent only ever sees its mesh), the go-control-plane
// delta server in front, tokens checked on every stream.
type ControlPlane struct {
	log *slog.Logger
	key []byte // token key; nil: tokens are not checked
	// HandshakeFails counts failed TLS handshakes (timeouts included), for metrics.
	HandshakeFails *atomic.Uint64
	// pushes, acks and nacks (by kind) count the link's traffic, for metrics.
	pushes, acks atomic.Uint64
	nacks        sync.Map // kind -> *atomic.Uint64

	mu      sync.Mutex
	caches  map[string]map[string]*cache.LinearCache // mesh -> kind
	current Served
	streams map[int64]*streamState
}

type streamState struct {
	id   token.Identity // from the token (empty without tokens)
	peer string
	node *token.Identity
}

type ctxKey struct{}

func New(key []byte, log *slog.Logger) *ControlPlane {
	return &ControlPlane{log: log, key: key, caches: map[string]map[string]*cache.LinearCache{},
		streams: map[int64]*streamState{}}
}

// apply makes the caches serve sv: only changed resources are updated, so the delta server
// sends each agent only what changed. It returns how many resources were updated and
// removed over the caches in use (a resource of several meshes counts once per mesh).
func (cp *ControlPlane) Apply(sv Served) (updated, removed int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.current = sv
	for meshName, byKind := range cp.caches {
		for kind, c := range byKind {
			u, r := syncCache(c, sv.ForMesh(meshName, kind))
			updated += u
			removed += r
		}
	}
	return updated, removed
}

// syncCache brings one cache to want, touching only what differs.
func syncCache(c *cache.LinearCache, want map[string][]byte) (updated, removed int) {
	have := c.GetResources()
	update := map[string]types.Resource{}
	var remove []string
	for name, body := range want {
		if old, ok := have[name]; ok && bytes.Equal(envelopeBody(old), body) {
			continue
		}
		update[name] = cplink.Envelope(body)
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
		}
	}
	if len(update) > 0 || len(remove) > 0 {
		_ = c.UpdateResources(update, remove) // errors only for resources that do not marshal
	}
	return len(update), len(remove)
}

func envelopeBody(r types.Resource) []byte {
	type bytesValue interface{ GetValue() []byte }
	if b, ok := r.(bytesValue); ok {
		return b.GetValue()
	}
	return nil
}

// cacheFor is the cache of one mesh and kind, created (and filled) on first use.
func (cp *ControlPlane) cacheFor(meshName, kind string) *cache.LinearCache {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	byKind := cp.caches[meshName]
	if byKind == nil {
		byKind = map[string]*cache.LinearCache{}
		cp.caches[meshName] = byKind
	}
	c := byKind[kind]
	if c == nil {
		c = cache.NewLinearCache(cplink.TypeURL(kind))
		syncCache(c, cp.current.ForMesh(meshName, kind))
		byKind[kind] = c
	}
	return c
}

// CreateWatch refuses state-of-the-world requests: the link is incremental only.
func (cp *ControlPlane) CreateWatch(*cache.Request, cache.Subscription, chan cache.Response) (func(), error) {
	return nil, status.Error(codes.Unimplemented, "kuma-cp serves incremental xDS (DeltaAggregatedResources) only")
}

// CreateDeltaWatch routes the watch to the cache of the node's mesh (node.cluster).
func (cp *ControlPlane) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	kind := cplink.KindOf(req.GetTypeUrl())
	if kind == "" {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type URL %q (want %s<Kind>)", req.GetTypeUrl(), cplink.TypeURLPrefix)
	}
	return cp.cacheFor(meshOfNode(req.GetNode().GetCluster()), kind).CreateDeltaWatch(req, sub, out)
}

// Fetch is not Served (REST xDS).
func (cp *ControlPlane) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("kuma-cp serves incremental xDS only")
}

func meshOfNode(cluster string) string {
	if cluster == "" {
		return "default"
	}
	return cluster
}

// authStream checks the token of every ADS stream before the xDS server sees it.
func (cp *ControlPlane) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if cp.key == nil {
		return handler(srv, ss)
	}
	from := "unknown"
	if p, ok := peer.FromContext(ss.Context()); ok {
		from = p.Addr.String()
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	auth := md.Get("authorization")
	if len(auth) == 0 || !strings.HasPrefix(auth[0], "Bearer ") {
		cp.log.Warn("refused a stream: no dataplane token", "peer", from)
		return status.Error(codes.Unauthenticated, "no dataplane token: send 'authorization: Bearer <token>' (kuma-dp --dataplane-token-file)")
	}
	id, err := token.Verify(cp.key, strings.TrimPrefix(auth[0], "Bearer "), time.Now())
	if err != nil {
		cp.log.Warn("refused a stream: bad dataplane token", "peer", from, "error", err)
		return status.Errorf(codes.Unauthenticated, "dataplane token refused: %v", err)
	}
	return handler(srv, &identStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), ctxKey{}, id)})
}

type identStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identStream) Context() context.Context { return s.ctx }

// callbacks log each agent's life on the link and hold its node to its token.
func (cp *ControlPlane) callbacks() serverv3.CallbackFuncs {
	return serverv3.CallbackFuncs{
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			st := &streamState{}
			st.id, _ = ctx.Value(ctxKey{}).(token.Identity)
			if p, ok := peer.FromContext(ctx); ok {
				st.peer = p.Addr.String()
			}
			cp.mu.Lock()
			cp.streams[id] = st
			cp.mu.Unlock()
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, node *core.Node) {
			cp.mu.Lock()
			st := cp.streams[id]
			delete(cp.streams, id)
			cp.mu.Unlock()
			if st != nil && st.node != nil {
				cp.log.Info("dataplane disconnected", "dataplane", st.node.Name, "mesh", st.node.Mesh, "peer", st.peer)
			}
		},
		StreamDeltaRequestFunc: cp.onRequest,
		StreamDeltaResponseFunc: func(int64, *discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse) {
			cp.pushes.Add(1)
		},
	}
}

// countNACK counts a refused change of one kind.
func (cp *ControlPlane) countNACK(kind string) {
	v, _ := cp.nacks.LoadOrStore(kind, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

func (cp *ControlPlane) onRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	cp.mu.Lock()
	st := cp.streams[id]
	cp.mu.Unlock()
	if st == nil {
		return status.Error(codes.Internal, "unknown stream")
	}
	if st.node == nil {
		n := req.GetNode()
		if n == nil || n.GetId() == "" {
			return status.Error(codes.InvalidArgument, "the first request must carry the node: id (dataplane name) and cluster (mesh)")
		}
		node := token.Identity{Name: n.GetId(), Mesh: meshOfNode(n.GetCluster())}
		if cp.key != nil && (node.Name != st.id.Name || node.Mesh != st.id.Mesh) {
			cp.log.Warn("refused a stream: the token is for another dataplane", "peer", st.peer,
				"token_dataplane", st.id.Name, "token_mesh", st.id.Mesh, "dataplane", node.Name, "mesh", node.Mesh)
			return status.Errorf(codes.PermissionDenied, "the token is for dataplane %q in mesh %q, not %q in mesh %q",
				st.id.Name, st.id.Mesh, node.Name, node.Mesh)
		}
		st.node = &node
		cp.log.Info("dataplane connected", "dataplane", node.Name, "mesh", node.Mesh, "peer", st.peer,
			"resumed_resources", len(req.GetInitialResourceVersions()))
	}
	if d := req.GetErrorDetail(); d != nil {
		cp.countNACK(cplink.KindOf(req.GetTypeUrl()))
		cp.log.Warn("NACK: a dataplane refused a change; it keeps its last good model",
			"dataplane", st.node.Name, "mesh", st.node.Mesh, "type_url", req.GetTypeUrl(), "nonce", req.GetResponseNonce(), "reason", d.GetMessage())
	} else if req.GetResponseNonce() != "" {
		cp.acks.Add(1)
		cp.log.Debug("ACK", "dataplane", st.node.Name, "mesh", st.node.Mesh, "type_url", req.GetTypeUrl(), "nonce", req.GetResponseNonce())
	}
	return nil
}

// connected counts the streams open now.
// HasAgent reports whether the agent of dataplane (mesh, name) holds a stream to this
// replica: what makes a router's gateway dataplane ready for the shard's DNS.
func (cp *ControlPlane) HasAgent(meshName, name string) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, st := range cp.streams {
		if st.node != nil && st.node.Name == name && st.node.Mesh == meshName {
			return true
		}
	}
	return false
}

func (cp *ControlPlane) Connected() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return len(cp.streams)
}

// grpcServer is the gRPC server, with the token check, keepalive that tolerates the
// agents' probes, and (given) TLS whose handshake failures are logged.
func (cp *ControlPlane) GRPCServer(creds credentials.TransportCredentials, handshake, maxAge time.Duration) *grpc.Server {
	if handshake <= 0 {
		handshake = 10 * time.Second
	}
	opts := []grpc.ServerOption{
		// A connection must finish its TLS and HTTP/2 handshake within this, or is closed:
		// idle and half-done connections are not held (gRPC's default is 120 s).
		grpc.ConnectionTimeout(handshake),
		grpc.StreamInterceptor(cp.authStream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A maximum connection age (gRPC adds +-10% jitter): agents reconnect in turn, so
		// streams spread over the replicas again after a scale-out; an agent resumes with the
		// versions it holds, so nothing unchanged is resent.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second,
			MaxConnectionAge: maxAge, MaxConnectionAgeGrace: min(maxAge/10, 10*time.Second)}),
		grpc.MaxConcurrentStreams(1000),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(&loggedCreds{TransportCredentials: creds, log: cp.log, fails: cp.HandshakeFails}))
	}
	return grpc.NewServer(opts...)
}

// serve registers ADS and health on gs and serves ln until ctx is cancelled.
func (cp *ControlPlane) Serve(ctx context.Context, gs *grpc.Server, ln net.Listener) error {
	xds := serverv3.NewServer(ctx, cp, cp.callbacks())
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xds)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	select {
	case <-ctx.Done():
		gs.Stop() // GracefulStop would wait for the agents' streams, which never end
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

// loggedCreds logs the TLS handshakes that fail (an agent that does not trust our
// certificate shows up here as "bad certificate").
type loggedCreds struct {
	credentials.TransportCredentials
	log   *slog.Logger
	fails *atomic.Uint64 // counted for metrics, when set
}

func (c *loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		if c.fails != nil {
			c.fails.Add(1)
		}
		c.log.Warn("TLS handshake failed (does the agent trust this control plane's CA? --ca-cert-file)",
			"peer", conn.RemoteAddr().String(), "error", err)
	}
	return out, info, err
}

func (c *loggedCreds) Clone() credentials.TransportCredentials {
	return &loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log, fails: c.fails}
}
