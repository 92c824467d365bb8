package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/gui"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/routesched"
	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// etcdParts is what serving from etcd runs beside the agents' server.
type etcdParts struct {
	cl *cpstore.Client
	st *cpstore.Etcd
	// followers is st for the followers of the whole store (the agents' feed, the routers'
	// zones, the routers' status): they share its lists, so a start reads etcd and holds
	// every document once.
	followers cpstore.Store
	feed      *fanout.Feed
	agents    *cpstore.Presence // the agents connected to each replica
	apiSrv    *api.Server
	api       *connlimit.HTTP
	dnsAddr   string
	leader    atomic.Bool
	replica   string
	leaderID  atomic.Value // string
	routes    routesched.Metrics
	routers   routerstatus.Metrics
	zones     atomic.Pointer[authdns.Catalog] // the shards' zones as last built and served (GET /zones; nil before: not ready)
	health    *cpstore.Health
}

// start connects to etcd and runs, in this order: the store's health and its feed to cp,
// this replica's agents' presence, the API, the shards' DNS, leader election (the leader
// schedules routes and writes routers' status) and the watch of who leads.
func (c *StoreConfig) start(ctx context.Context, cp *fanout.ControlPlane, log *slog.Logger) (*etcdParts, error) {
	token, err := readAdminToken(c.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	cl, err := c.connect(ctx, log)
	if err != nil {
		return nil, err
	}
	p := &etcdParts{cl: cl, st: cl.Store(c.Etcd.Prefix), replica: c.ReplicaID}
	p.followers = cpstore.SharedLists(p.st)
	p.leaderID.Store("")
	p.follow(ctx, c, cp, log)
	if err := p.listenAPI(c, token, cp, log); err != nil {
		return nil, err
	}
	dns, err := c.shardDNS(ctx, p.followers, cl.Client, p.leader.Load, p.feed, log.With("part", "dns"), func(z *shardzones.Zones) { p.zones.Store(z.All) })
	if err != nil {
		return nil, err
	}
	if dns != nil {
		udp, _ := dns.Addrs()
		p.dnsAddr = udp.String()
	}
	go p.api.Serve(ctx)
	go p.st.RunWhileLeader(ctx, "kuma-cp", c.ReplicaID, c.LeaseTTL, func(lctx context.Context) { p.lead(lctx, c, cp, log) })
	go p.watchLeader(ctx)
	apiAddr := p.api.Addr().String()
	log.Info("serving from etcd", "endpoints", c.Etcd.Endpoints, "prefix", c.Etcd.Prefix, "api", apiAddr, "gui", "http://"+apiAddr+gui.Prefix+"/", "replica", c.ReplicaID)
	return p, nil
}

// connect checks etcd's TLS and makes the client, closed when ctx ends.
func (c *StoreConfig) connect(ctx context.Context, log *slog.Logger) (*cpstore.Client, error) {
	if err := c.Etcd.Check(ctx); err != nil {
		return nil, err
	}
	cl, err := c.Etcd.Client(log)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); cl.Close() }()
	return cl, nil
}

// follow runs the store's health, its feed to cp, and this replica's presence with the
// agents connected to it.
func (p *etcdParts) follow(ctx context.Context, c *StoreConfig, cp *fanout.ControlPlane, log *slog.Logger) {
	// Whether a quorum of etcd is reached: /ready, kuma_cp_store_synced and every request
	// of the store follow it.
	p.health = p.st.Health(c.LeaseTTL, log.With("part", "store"))
	go p.health.Run(ctx)
	p.feed = fanout.NewFeed(p.followers, cp, log.With("part", "store"))
	go p.feed.Run(ctx)
	// Every replica publishes the agents connected to it (store.Presence): GET /agents of
	// any replica names them all.
	p.agents = p.st.Presence("agents", c.ReplicaID, c.LeaseTTL)
	go p.agents.Run(ctx)
	go cp.ShareAgents(ctx, p.agents, time.Second)
}

// listenAPI binds the API's port (served once the shards' DNS is set up).
func (p *etcdParts) listenAPI(c *StoreConfig, token string, cp *fanout.ControlPlane, log *slog.Logger) error {
	p.apiSrv = &api.Server{Store: p.st, AdminToken: token, Status: p.status,
		Agents: func() []api.Agent { return api.MergeAgents(cp.AgentNames(), c.ReplicaID, p.agents.Others()) },
		Zones:  p.zones.Load}
	var err error
	if p.api, err = connlimit.ListenHTTP(c.APIAddress, c.APIHTTP, apiHandler(p.apiSrv, log)); err != nil {
		return fmt.Errorf("--api-address %q: %w", c.APIAddress, err)
	}
	p.api.Server.RegisterOnShutdown(p.apiSrv.CloseEvents)
	return nil
}

// lead is the leader's work, until leadership is lost (lctx ends): the route scheduler and
// the routers' status.
func (p *etcdParts) lead(lctx context.Context, c *StoreConfig, cp *fanout.ControlPlane, log *slog.Logger) {
	p.leader.Store(true)
	log.Info("this replica is the leader", "replica", c.ReplicaID)
	context.AfterFunc(lctx, func() { // not the leader from the moment it may not be
		p.leader.Store(false)
		log.Info("leadership lost", "replica", c.ReplicaID)
	})
	rc := &routesched.Reconciler{Store: p.st, Strategy: routing.Strategies[c.RouteStrategy], Log: log.With("part", "routes"), Metrics: &p.routes, UserZones: c.DNS.UserZones}
	// A gateway replica is ready while its agent holds a stream to any replica (each
	// publishes its agents: store.Presence).
	online := func(meshName, name string) bool {
		return cp.HasAgent(meshName, name) || p.agents.Elsewhere(meshName+"/"+name)
	}
	rw := &routerstatus.Writer{Store: p.followers, Online: online, OnlineKnown: p.agents.Listed, Log: log.With("part", "routers"), Metrics: &p.routers}
	done := make(chan struct{})
	go func() { rw.Run(lctx); close(done) }()
	rc.Run(lctx)
	<-done
}

// watchLeader reads the current leader twice a second, for metrics and status ("" when it
// cannot be read), until ctx ends.
func (p *etcdParts) watchLeader(ctx context.Context) {
	for ctx.Err() == nil {
		id, err := p.st.Leader(ctx, "kuma-cp")
		if err != nil {
			id = ""
		}
		p.leaderID.Store(id)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ready is nil while the store is read and followed - a quorum of etcd reached, every
// resource listed and the changes watched - and the routers' zones were built from it and
// served (to the agents and on --dns-address). Else why not: agents are served the last
// resources read meanwhile.
func (p *etcdParts) ready() error {
	if err := p.health.Err(); err != nil {
		return fmt.Errorf("%w; agents are served the last resources read", err)
	}
	if !p.feed.Synced() {
		return errors.New("the store is not read yet (or unreachable)")
	}
	if p.zones.Load() == nil {
		return errors.New("the routers' zones are not built yet")
	}
	return nil
}

// status is the API's GET /status on etcd: this replica, the leader, the store's revision
// and health, the replicas alive and etcd's members.
func (p *etcdParts) status() any {
	err := p.ready()
	leader := p.leaderID.Load()
	if p.health.Err() != nil {
		leader = "" // unknown: the last one read may have lost its lease since
	}
	st := map[string]any{"replica": p.replica, "leader": leader, "isLeader": p.leader.Load(),
		"storeRevision": p.feed.ContentRevision(), "synced": err == nil}
	if err != nil {
		st["storeError"] = err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ids, err := p.st.Candidates(ctx, "kuma-cp"); err == nil {
		st["replicas"] = strings.Join(ids, ", ") // every replica alive, the leader first
	}
	if m, err := p.cl.Members(time.Second, 500*time.Millisecond); err != nil {
		st["etcdMembers"] = "unknown: " + err.Error()
	} else {
		st["etcdMembers"], st["etcdMembersReachable"] = m.Total, m.Reachable
		if len(m.Down) > 0 {
			st["etcdMembersUnreachable"] = strings.Join(m.Down, ", ")
		}
	}
	return st
}
