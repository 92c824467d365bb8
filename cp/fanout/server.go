// Package fanout is the control plane's side of the link to agents: the incremental ADS
// (delta xDS) server, with what it serves kept per mesh and kind as a versioned table with a
// change log (table.go) so that one change costs the agents subscribed work in proportion to
// what changed, token checks on every stream, the served resources (Served), the Feed
// that keeps them in step with the store, and which agents hold a stream to this replica
// (AgentNames; ShareAgents hands them to the other replicas: agents.go). It never decodes
// files or writes the store.
package fanout

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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

// ControlPlane serves the store's resources over incremental ADS: one table per mesh and
// kind (so an agent only ever sees its mesh), tokens checked on every stream.
type ControlPlane struct {
	log *slog.Logger
	key []byte // token key; nil: tokens are not checked
	// HandshakeFails counts failed TLS handshakes (timeouts included), for metrics.
	HandshakeFails *atomic.Uint64
	// AgentKeepalive is how long an agent's connection may stay silent before the control
	// plane pings it: an agent not heard from for twice this (frozen, cut off, starved)
	// stops counting as connected (a gateway replica then leaves its router's answers);
	// its connection is closed once the ping has waited AgentDropAfter (liveness.go).
	// DefaultAgentKeepalive when 0; set it before GRPCServer.
	AgentKeepalive time.Duration
	// pushes, acks and nacks (by kind) count the link's traffic, for metrics.
	pushes, acks atomic.Uint64
	nacks        sync.Map // kind -> *atomic.Uint64

	mu      sync.Mutex                   // tables, current; Apply holds it throughout
	tables  map[string]map[string]*table // mesh -> kind
	current Served

	smu     sync.Mutex // streams, agents
	lastID  int64
	streams map[int64]*streamState
	agents  map[token.Identity]int // streams per dataplane (mesh, name), once named
	// agentsGen counts the changes of agents (a dataplane's first stream, its last gone).
	agentsGen uint64

	first *firstSyncs // the queue of first syncs

	conns  atomic.Pointer[heardListener] // the link's connections (Serve), for their liveness
	silent atomic.Int64                  // streams whose agent is not answering (metrics)
}

type streamState struct {
	id   token.Identity // from the token (empty without tokens)
	peer string
	node *token.Identity
	gzip bool // the agent takes compressed first syncs (cplink.FeatureGzipResources)
	// heard is when the agent's connection was last read from (nil: not known, always
	// heard); silent (under smu): not heard for silentAfter, so not counted in agents.
	heard  *atomic.Int64
	silent bool
}

type ctxKey struct{}

func New(key []byte, log *slog.Logger) *ControlPlane {
	return &ControlPlane{log: log, key: key, tables: map[string]map[string]*table{},
		streams: map[int64]*streamState{}, agents: map[token.Identity]int{}, first: newFirstSyncs(FirstSyncBudget)}
}

// Apply serves sv: each table in use is compared with it and only the resources that
// differ are logged as changes, so each agent is sent only what changed. It returns how
// many resources were updated and removed over the tables in use (a resource of several
// meshes counts once per mesh).
func (cp *ControlPlane) Apply(sv Served) (updated, removed int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.current = sv
	for meshName, byKind := range cp.tables {
		for kind, t := range byKind {
			u, r := t.sync(sv.ForMesh(meshName, kind))
			updated += u
			removed += r
		}
	}
	return updated, removed
}

// tableFor is the table of one mesh and kind, created (and filled) on first use.
func (cp *ControlPlane) tableFor(meshName, kind string) *table {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	byKind := cp.tables[meshName]
	if byKind == nil {
		byKind = map[string]*table{}
		cp.tables[meshName] = byKind
	}
	t := byKind[kind]
	if t == nil {
		t = newTable(kind)
		t.sync(cp.current.ForMesh(meshName, kind))
		byKind[kind] = t
	}
	return t
}

// Resources is what the agents of a mesh are served of one kind now: name -> the
// resource's canonical document.
func (cp *ControlPlane) Resources(meshName, kind string) map[string][]byte {
	return cp.tableFor(meshName, kind).resources()
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
	var tok string
	if auth := md.Get("authorization"); len(auth) > 0 {
		tok, _ = token.FromBearer(auth[0])
	}
	if tok == "" {
		cp.log.Warn("refused a stream: no dataplane token", "peer", from)
		return status.Error(codes.Unauthenticated, "no dataplane token: send 'authorization: Bearer <token>' (kuma-dp --dataplane-token-file)")
	}
	id, err := token.Verify(cp.key, tok, time.Now())
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

// open registers a stream; close forgets it.
func (cp *ControlPlane) open(st *streamState) int64 {
	cp.smu.Lock()
	defer cp.smu.Unlock()
	cp.lastID++
	cp.streams[cp.lastID] = st
	return cp.lastID
}

func (cp *ControlPlane) close(id int64) {
	cp.smu.Lock()
	st := cp.streams[id]
	delete(cp.streams, id)
	if st != nil && st.node != nil && !st.silent {
		cp.dropAgentLocked(*st.node)
	}
	if st != nil && st.silent {
		cp.silent.Add(-1)
	}
	cp.smu.Unlock()
	if st != nil && st.node != nil {
		cp.log.Info("dataplane disconnected", "dataplane", st.node.Name, "mesh", st.node.Mesh, "peer", st.peer)
	}
}

// countNACK counts a refused change of one kind.
func (cp *ControlPlane) countNACK(kind string) {
	v, _ := cp.nacks.LoadOrStore(kind, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

// onRequest holds the stream's node to its token (first request) and counts ACKs and NACKs.
func (cp *ControlPlane) onRequest(st *streamState, req *discovery.DeltaDiscoveryRequest) error {
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
		cp.smu.Lock()
		st.node = &node
		st.gzip = slices.Contains(n.GetClientFeatures(), cplink.FeatureGzipResources)
		cp.addAgentLocked(node)
		cp.smu.Unlock()
		cp.log.Info("dataplane connected", "dataplane", node.Name, "mesh", node.Mesh, "peer", st.peer,
			"resumed_resources", len(req.GetInitialResourceVersions()))
	}
	if d := req.GetErrorDetail(); d != nil {
		cp.countNACK(cplink.KindOf(req.GetTypeUrl()))
		cp.log.Warn("NACK: a dataplane refused a change; it keeps its last good model",
			"dataplane", st.node.Name, "mesh", st.node.Mesh, "type_url", req.GetTypeUrl(), "nonce", req.GetResponseNonce(), "reason", d.GetMessage())
	} else if req.GetResponseNonce() != "" {
		cp.acks.Add(1)
		if !cp.log.Enabled(context.Background(), slog.LevelDebug) {
			return nil
		}
		cp.log.Debug("ACK", "dataplane", st.node.Name, "mesh", st.node.Mesh, "type_url", req.GetTypeUrl(), "nonce", req.GetResponseNonce())
	}
	return nil
}

// HasAgent reports whether the agent of dataplane (mesh, name) holds a stream to this
// replica and answers (was heard from within twice AgentKeepalive: liveness.go): what
// makes a router's gateway dataplane ready for the shard's DNS.
func (cp *ControlPlane) HasAgent(meshName, name string) bool {
	cp.smu.Lock()
	defer cp.smu.Unlock()
	return cp.agents[token.Identity{Name: name, Mesh: meshName}] > 0
}

// Connected counts the streams open now.
func (cp *ControlPlane) Connected() int {
	cp.smu.Lock()
	defer cp.smu.Unlock()
	return len(cp.streams)
}

// DefaultAgentKeepalive is ControlPlane.AgentKeepalive's default: a frozen agent stops
// counting as connected within 4 s, an idle one costs a ping every 2 s (a few dozen bytes
// each way).
const DefaultAgentKeepalive = 2 * time.Second

func (cp *ControlPlane) agentKeepalive() time.Duration {
	if cp.AgentKeepalive <= 0 {
		return DefaultAgentKeepalive
	}
	return max(cp.AgentKeepalive, time.Second) // gRPC's least
}

// MaxRequestBytes is the largest request an agent may send (a resume's versions).
const MaxRequestBytes = 64 << 20

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
		// Protocol Buffers, with a table's full answer written from its one shared encoding.
		grpc.ForceServerCodecV2(newLinkCodec()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A maximum connection age (gRPC adds +-10% jitter): agents reconnect in turn, so
		// streams spread over the replicas again after a scale-out; an agent resumes with the
		// versions it holds, so nothing unchanged is resent.
		// A silent agent is pinged: one that is frozen (SIGSTOP) or cut off without its
		// connection closing (a partition) stops counting as connected within 2 x
		// AgentKeepalive, so a gateway replica's readiness is true within seconds
		// (liveness.go). Its connection is closed only when the ping is not answered within
		// AgentDropAfter: an agent that answers late keeps its stream (a 2 s timeout closed
		// thousands of healthy agents' connections in a reconnect storm on a loaded core).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cp.agentKeepalive(), Timeout: max(AgentDropAfter, cp.agentKeepalive()),
			MaxConnectionAge: maxAge, MaxConnectionAgeGrace: min(maxAge/10, 10*time.Second)}),
		grpc.MaxConcurrentStreams(1000),
		// Memory per connected agent: an idle agent's connection holds no write buffer (it is
		// taken for a flush and given back) and no read buffer: gRPC reads from the
		// connection, which takes a pooled chunk only while the socket has data
		// (connread.go). gRPC's own buffer was held by every connection: 7 KiB of the 60 an
		// idle agent cost (bench/fleet --idle); without any, reading frame by frame cost the
		// storm a third more CPU.
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(0),
		// An agent resuming lists every version it holds in one request: gRPC's default
		// limit (4 MiB, ~150,000 Dataplanes) refused the resume of a large mesh's agents,
		// whose every reconnection was then refused again.
		grpc.MaxRecvMsgSize(MaxRequestBytes),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(&loggedCreds{TransportCredentials: creds, log: cp.log, fails: cp.HandshakeFails}))
	}
	return grpc.NewServer(opts...)
}

// serve registers ADS and health on gs and serves ln until ctx is cancelled.
func (cp *ControlPlane) Serve(ctx context.Context, gs *grpc.Server, ln net.Listener) error {
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, ads{cp: cp})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	hl := newHeardListener(ln)
	cp.conns.Store(hl)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go cp.watchSilence(wctx)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(hl) }()
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
