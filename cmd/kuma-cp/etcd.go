package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/gui"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/routesched"
	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// etcdConfig is serve's store settings.
type etcdConfig struct {
	store                                 string
	conn                                  cli.Etcd
	apiAddress, adminTokenFile, replicaID string
	apiHTTP                               connlimit.HTTPConfig // the API port's limits (bindHTTPFlags)
	leaseTTL                              time.Duration
	dns                                   dnsConfig
	routeStrategy                         string
}

// dnsConfig is the authoritative DNS for router shards (--dns-address; --store etcd).
type dnsConfig struct {
	address, notifyKey           string
	userZones, nameservers, secs []string
	transferFrom                 []string
	tsig                         map[string]string
}

func (c *etcdConfig) bind(fs *pflag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.store, "store", "dir", "where resources live: dir (--resources-dir, the default) or etcd (--etcd-endpoints; replicas, the write API)")
	c.conn.Bind(fs, "etcd client URLs, comma-separated (--store etcd)")
	fs.StringVar(&c.apiAddress, "api-address", "127.0.0.1:5681", "the API (Kuma's REST shape) and the web GUI at /gui, loopback unless told otherwise; with --store dir they are served when --admin-token-file is given")
	fs.StringVar(&c.adminTokenFile, "admin-token-file", "", "file holding the admin token that writes through the API need (required with --store etcd; with --store dir it turns the API on)")
	fs.StringVar(&c.replicaID, "replica-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this replica's name in leader election")
	fs.DurationVar(&c.leaseTTL, "leader-lease-ttl", cpstore.DefaultLeaseTTL, "a leader that stops renewing for this long is replaced")
	fs.StringVar(&c.routeStrategy, "route-strategy", "round-robin", "how the leader schedules routes onto routers: round-robin or least-routes")
	fs.StringVar(&c.dns.address, "dns-address", "", "serve authoritative DNS for router shards and users' domains here, UDP and TCP (e.g. 127.0.0.1:5653; --store etcd)")
	fs.StringSliceVar(&c.dns.userZones, "dns-user-zone", nil, "a users' domain this server is authoritative for (repeatable)")
	fs.StringSliceVar(&c.dns.nameservers, "dns-nameserver", nil, "NS of every zone, NAME or NAME=IP (glue when inside the zone; repeatable)")
	fs.StringSliceVar(&c.dns.transferFrom, "dns-transfer-from", nil, "networks allowed zone transfers (AXFR/IXFR) without TSIG, e.g. 10.0.0.0/8 (repeatable)")
	fs.StringSliceVar(&c.dns.secs, "dns-secondary", nil, "a secondary (IP:port) told of every change by NOTIFY (repeatable)")
	fs.StringToStringVar(&c.dns.tsig, "dns-tsig-key", nil, "TSIG key name=base64-secret (HMAC-SHA256) allowed to transfer zones (repeatable)")
	fs.StringVar(&c.dns.notifyKey, "dns-notify-key", "", "the TSIG key (of --dns-tsig-key) that signs NOTIFY")
}

// dnsInput is the zones' settings (--dns-user-zone, --dns-nameserver, the NS address).
func (c *etcdConfig) dnsInput() (authdns.Input, error) {
	var in authdns.Input
	in.UserZones = c.dns.userZones
	if ap, err := netip.ParseAddrPort(c.dns.address); err == nil {
		in.DefaultNSAddr = ap.Addr()
	}
	for _, ns := range c.dns.nameservers {
		name, ip, _ := strings.Cut(ns, "=")
		n := authdns.Nameserver{Name: name}
		if ip != "" {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				return in, fmt.Errorf("--dns-nameserver %q: %w", ns, err)
			}
			n.Addrs = []netip.Addr{a}
		}
		in.Nameservers = append(in.Nameservers, n)
	}
	return in, nil
}

// shardDNS builds the zones of the router shards from the store and serves them: to the
// agents' resolvers through feed always, and authoritatively on --dns-address when given.
// The zones' serials are kept in etcd on cl, written by the leader (leading); more sinks
// get every catalog built too (the API's GET /zones).
func (c *etcdConfig) shardDNS(ctx context.Context, st cpstore.Store, cl *clientv3.Client, leading func() bool, cp *fanout.ControlPlane, feed *fanout.Feed, log *slog.Logger, more ...shardzones.Sink) (*authdns.Server, error) {
	in, err := c.dnsInput()
	if err != nil {
		return nil, err
	}
	if c.dns.address == "" && len(in.Nameservers) == 0 {
		// the zones go to the agents only: each answers them itself, on this machine's
		// loopback as far as its pod is concerned
		in.DefaultNSAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	sinks := append([]shardzones.Sink{shardzones.FeedSink(feed, log)}, more...)
	var srv *authdns.Server
	if c.dns.address != "" {
		cfg := authdns.Config{Address: c.dns.address, TSIG: c.dns.tsig, NotifyKey: c.dns.notifyKey, Secondaries: c.dns.secs, Log: log}
		for _, p := range c.dns.transferFrom {
			pre, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("--dns-transfer-from %q: %w", p, err)
			}
			cfg.TransferFrom = append(cfg.TransferFrom, pre)
		}
		if srv, err = authdns.New(cfg); err != nil {
			return nil, err
		}
		go srv.Run(ctx)
		sinks = append(sinks, func(z *shardzones.Zones) { srv.Swap(z.All) })
	}
	// A gateway replica's readiness is in its Router's status (the leader writes it,
	// routerstatus): every replica answers the same, as the views show it.
	serials := shardzones.NewSerials(cl, c.conn.Prefix, leading, log)
	go shardzones.Run(ctx, st, in, serials, log, sinks...)
	return srv, nil
}

func (c *etcdConfig) check() error {
	switch {
	case c.store != "etcd":
		return fmt.Errorf("--store %q: want dir or etcd", c.store)
	case c.conn.Endpoints == "":
		return errors.New("--store etcd needs --etcd-endpoints")
	case c.adminTokenFile == "":
		return errors.New("--store etcd needs --admin-token-file (writes through the API are guarded by it)")
	case c.replicaID == "" || strings.ContainsFunc(c.replicaID, func(r rune) bool { return r == '/' || r == ',' || unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		// inspect's REPLICAS names it as given: a presence key holds no '/', a comma joins them
		return fmt.Errorf("--replica-id %q: want a name without '/', ',' or whitespace", c.replicaID)
	case cpstore.ValidPrefix(c.conn.Prefix) != nil:
		return fmt.Errorf("--etcd-prefix %q: %w", c.conn.Prefix, cpstore.ValidPrefix(c.conn.Prefix))
	case routing.Strategies[c.routeStrategy] == nil:
		return fmt.Errorf("--route-strategy %q: want round-robin or least-routes", c.routeStrategy)
	}
	for _, z := range c.dns.userZones {
		if err := routing.CheckUserZone(z); err != nil {
			return fmt.Errorf("--dns-user-zone: %w", err)
		}
	}
	if ap, err := netip.ParseAddrPort(c.dns.address); err == nil && ap.Addr().IsUnspecified() && len(c.dns.nameservers) == 0 {
		return fmt.Errorf("--dns-address %q listens on every address: give --dns-nameserver NAME=IP, the name and address secondaries and resolvers reach this server at (the zones' NS and its glue)", c.dns.address)
	}
	return nil
}

// etcdParts is what serving from etcd runs beside the agents' server.
type etcdParts struct {
	cl       *cpstore.Client
	st       *cpstore.Etcd
	feed     *fanout.Feed
	apiSrv   *api.Server
	api      *connlimit.HTTP
	apiAddr  string
	dnsAddr  string
	leader   atomic.Bool
	replica  string
	leaderID atomic.Value // string
	routes   routesched.Metrics
	routers  routerstatus.Metrics
	zones    atomic.Pointer[authdns.Catalog] // the shards' zones as last built (GET /zones)
	health   *cpstore.Health
}

func (c *etcdConfig) start(ctx context.Context, cp *fanout.ControlPlane, log *slog.Logger) (*etcdParts, error) {
	token, err := os.ReadFile(c.adminTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file %q: %w", c.adminTokenFile, err)
	}
	if err := c.conn.Check(ctx); err != nil {
		return nil, err
	}
	cl, err := c.conn.Client(log)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); cl.Close() }()
	p := &etcdParts{cl: cl, st: cl.Store(c.conn.Prefix), replica: c.replicaID}
	p.leaderID.Store("")
	// Whether a quorum of etcd is reached: /ready, kuma_cp_store_synced and every request
	// of the store follow it.
	p.health = p.st.Health(c.leaseTTL, log.With("part", "store"))
	go p.health.Run(ctx)
	p.feed = fanout.NewFeed(p.st, cp, log.With("part", "store"))
	go p.feed.Run(ctx)
	// Every replica publishes the agents connected to it (store.Presence): GET /agents of
	// any replica names them all.
	agents := p.st.Presence("agents", c.replicaID, c.leaseTTL)
	go agents.Run(ctx)
	go cp.ShareAgents(ctx, agents, time.Second)
	p.apiSrv = &api.Server{Store: p.st, AdminToken: strings.TrimSpace(string(token)), Status: p.status,
		Agents: func() []api.Agent { return api.MergeAgents(cp.AgentNames(), c.replicaID, agents.Others()) },
		Zones:  p.zones.Load}
	if p.api, err = connlimit.ListenHTTP(c.apiAddress, c.apiHTTP, apiHandler(p.apiSrv, log)); err != nil {
		return nil, fmt.Errorf("--api-address %q: %w", c.apiAddress, err)
	}
	p.api.Server.RegisterOnShutdown(p.apiSrv.CloseEvents)
	p.apiAddr = p.api.Addr().String()
	dns, err := c.shardDNS(ctx, p.st, cl.Client, p.leader.Load, cp, p.feed, log.With("part", "dns"), func(z *shardzones.Zones) { p.zones.Store(z.All) })
	if err != nil {
		return nil, err
	}
	if dns != nil {
		udp, _ := dns.Addrs()
		p.dnsAddr = udp.String()
	}
	go p.api.Serve(ctx)
	go p.st.RunWhileLeader(ctx, "kuma-cp", c.replicaID, c.leaseTTL, func(lctx context.Context) {
		p.leader.Store(true)
		log.Info("this replica is the leader", "replica", c.replicaID)
		context.AfterFunc(lctx, func() { // not the leader from the moment it may not be
			p.leader.Store(false)
			log.Info("leadership lost", "replica", c.replicaID)
		})
		// The route scheduler runs on the leader only, until leadership is lost.
		rc := &routesched.Reconciler{Store: p.st, Strategy: routing.Strategies[c.routeStrategy], Log: log.With("part", "routes"), Metrics: &p.routes, UserZones: c.dns.userZones}
		// So does the routers' status: a gateway replica is ready while its agent holds a
		// stream to any replica (each publishes its agents: store.Presence).
		online := func(meshName, name string) bool {
			return cp.HasAgent(meshName, name) || agents.Elsewhere(meshName+"/"+name)
		}
		rw := &routerstatus.Writer{Store: p.st, Online: online, OnlineKnown: agents.Listed, Log: log.With("part", "routers"), Metrics: &p.routers}
		done := make(chan struct{})
		go func() { rw.Run(lctx); close(done) }()
		rc.Run(lctx)
		<-done
	})
	go func() { // the current leader, for metrics and status ("" when it cannot be read)
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
	}()
	log.Info("serving from etcd", "endpoints", c.conn.Endpoints, "prefix", c.conn.Prefix, "api", p.apiAddr, "gui", "http://"+p.apiAddr+gui.Prefix+"/", "replica", c.replicaID)
	return p, nil
}

// ready is nil while the store is read and followed: a quorum of etcd reached, every
// resource listed and the changes watched. Else why not: agents are served the last
// resources read meanwhile.
func (p *etcdParts) ready() error {
	if err := p.health.Err(); err != nil {
		return fmt.Errorf("%w; agents are served the last resources read", err)
	}
	if !p.feed.Synced() {
		return errors.New("the store is not read yet (or unreachable)")
	}
	return nil
}

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
	if total, reachable, down, err := p.members(); err != nil {
		st["etcdMembers"] = "unknown: " + err.Error()
	} else {
		st["etcdMembers"], st["etcdMembersReachable"] = total, reachable
		if len(down) > 0 {
			st["etcdMembersUnreachable"] = strings.Join(down, ", ")
		}
	}
	return st
}

// members asks etcd for its members (1 s at most) and each member for its status (500 ms
// at most): how many there are, how many answer, and those that do not (name and client
// URLs).
func (p *etcdParts) members() (total, reachable int, down []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ml, err := p.cl.MemberList(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	answers := func(url string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := p.cl.Status(ctx, url)
		return err == nil
	}
	for _, m := range ml.Members {
		ok := false
		for _, u := range m.ClientURLs {
			if answers(u) {
				ok = true
				break
			}
		}
		if ok {
			reachable++
		} else {
			down = append(down, m.Name+" ("+strings.Join(m.ClientURLs, ",")+")")
		}
	}
	return len(ml.Members), reachable, down, nil
}

func (p *etcdParts) register(reg *prometheus.Registry) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge("kuma_cp_leader", "1 while this replica is the leader.", func() float64 { return b(p.leader.Load()) }),
		gauge("kuma_cp_store_revision", "The store revision served to agents.", func() float64 { return float64(p.feed.Revision()) }),
		gauge("kuma_cp_store_revision_seen", "The last store revision seen on the watch (served or not yet).", func() float64 { return float64(p.feed.SeenRevision()) }),
		gauge("kuma_cp_watch_lag_revisions", "Store revisions seen on the watch and not yet served to agents.", func() float64 { n, _ := p.feed.Lag(); return float64(n) }),
		gauge("kuma_cp_watch_lag_seconds", "How long the oldest change seen on the watch has waited to be served to agents (0 when caught up).", func() float64 { _, d := p.feed.Lag(); return d.Seconds() }),
		gauge("kuma_cp_store_synced", "1 while the store is read and its changes followed (a quorum of etcd reached); 0 before, and while it is not (/ready says why).", func() float64 { return b(p.ready() == nil) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_store_unreadable_keys_total", Help: "Keys under the store's prefix found holding no resource (skipped; each version counted once, logged once)."}, func() float64 { return float64(p.st.Unreadable()) }),
		writesCollector{p.apiSrv},
		gauge("kuma_cp_routes_pending", "Routes not scheduled yet (leader only; the reason is in each route's status).", func() float64 { return float64(p.routes.Pending.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_routes_scheduled_total", Help: "Route bindings made by this replica while leader."}, func() float64 { return float64(p.routes.Scheduled.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_routes_rescheduled_total", Help: "Route bindings removed to schedule the route again (relabel, host change, router deleted)."}, func() float64 { return float64(p.routes.Rescheduled.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_route_mass_unbinding_slowed_total", Help: "Scheduling passes that undid a router's bindings in steps (more than half of them at once)."}, func() float64 { return float64(p.routes.MassUnbindSlowed.Load()) }),
		routeFailures{&p.routes},
		&p.routers,
	)
}

// writesCollector exposes the API's writes by status code.
type writesCollector struct{ s *api.Server }

var writesDesc = prometheus.NewDesc("kuma_cp_api_writes_total", "Writes through the API by HTTP status code.", []string{"code"}, nil)

func (w writesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- writesDesc }
func (w writesCollector) Collect(ch chan<- prometheus.Metric) {
	for code, n := range w.s.Writes() {
		ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(n), fmt.Sprint(code))
	}
}

// routeFailures exposes scheduling failures by reason.
type routeFailures struct{ m *routesched.Metrics }

var routeFailuresDesc = prometheus.NewDesc("kuma_cp_route_scheduling_failures_total", "Failed attempts to schedule a route, by reason.", []string{"reason"}, nil)

func (r routeFailures) Describe(ch chan<- *prometheus.Desc) { ch <- routeFailuresDesc }
func (r routeFailures) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range r.m.Failures() {
		ch <- prometheus.MustNewConstMetric(routeFailuresDesc, prometheus.CounterValue, float64(n), reason)
	}
}
