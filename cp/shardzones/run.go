package shardzones

import (
	"context"
	"log/slog"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
)

// quietBurst is how long the store stays quiet before a burst of changes is built: one
// build per burst.
const quietBurst = 20 * time.Millisecond

// Run keeps the zones in step with st until ctx ends, handing every build to sinks (the DNS
// server's Swap of every mesh's zones; each mesh's zones sent to its agents, FeedSink): a
// list, then a build after every burst of changes (each resource changed decoded once: the
// view; the store listed again on compaction, and when a Router new or selecting other
// dataplanes needs them). Readiness is in the store (the Routers' status), so a replica going
// not-ready is a change like any other and every replica answers the same. Serials come from
// serials, kept in etcd (nil: this process's own, authdns.Serials), so replicas give the same
// serial for the same content, also after a restart.
func Run(ctx context.Context, st store.Store, cfg authdns.Input, serials *Serials, log *slog.Logger, sinks ...Sink) {
	z := newZoner(st, cfg, serials, log, sinks)
	z.startSerials(ctx)
	for ctx.Err() == nil {
		rev, err := z.list(ctx)
		if err != nil {
			z.log.Warn("store unreachable; the zones stay as they were", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		z.follow(ctx, rev)
	}
}

// zoner is Run's state: the store as the zones read it, and the catalog served last.
type zoner struct {
	st      store.Store
	cfg     authdns.Input // the zones' settings: nameservers, hostmaster, user zones
	serials *Serials
	local   *authdns.Serials // the serials when serials is nil
	log     *slog.Logger
	sinks   []Sink
	view    *view
	served  *authdns.Catalog
	// recordsChanged says the zones must be built again for the serials' records (nil
	// without records).
	recordsChanged <-chan struct{}
}

func newZoner(st store.Store, cfg authdns.Input, serials *Serials, log *slog.Logger, sinks []Sink) *zoner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &zoner{st: st, cfg: cfg, serials: serials, local: authdns.NewSerials(), log: log, sinks: sinks, view: newView(log)}
}

// startSerials follows the serials' records (read once before the first build: its serials
// are the records').
func (z *zoner) startSerials(ctx context.Context) {
	if z.serials == nil {
		return
	}
	go z.serials.Run(ctx)
	if _, err := z.serials.Load(ctx); err != nil {
		z.log.Warn("zone serials unreadable; read again when the store answers", "error", err)
	}
	z.recordsChanged = z.serials.Changed()
}

// list reads the whole store into the view and builds; it returns the revision to watch from.
func (z *zoner) list(ctx context.Context) (int64, error) {
	items, _, rev, err := z.st.List(ctx, "", "", "", 0)
	if err != nil {
		return 0, err
	}
	z.view.load(items)
	store.ListDone() // the documents are not kept: their memory returned to the system
	z.build()
	return rev, nil
}

// follow builds after every burst of the store's changes from rev, and when the serials'
// records ask, until the store must be listed again (or ctx ends).
func (z *zoner) follow(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := z.st.Watch(wctx, rev)
	for {
		select {
		case <-ctx.Done():
			return
		case <-z.recordsChanged:
			z.build()
		case e, ok := <-events:
			if !z.takeBurst(e, ok, events) {
				return
			}
			z.build()
		}
	}
}

// takeBurst takes e and every change following it until the store is quiet for quietBurst.
// It returns false when the store must be listed again: the watch ended, the store compacted
// past it, or a Router wants dataplanes the view does not hold.
func (z *zoner) takeBurst(e store.Event, ok bool, events <-chan store.Event) bool {
	for {
		if !ok || e.Type == store.Relist || z.take(e) {
			return false
		}
		select {
		case e, ok = <-events:
		case <-time.After(quietBurst):
			return true
		}
	}
}

// take records one change in the view; true when the store must be listed again.
func (z *zoner) take(e store.Event) (relist bool) {
	switch e.Type {
	case store.Put:
		return z.view.take(e.Item)
	case store.Delete:
		z.view.remove(e.Item.Key)
	}
	return false
}

// build builds the zones from the view and the serials' records as they are now, and hands
// them to the sinks. A signal of the records pending from before is answered by it (the first
// build at a start would otherwise be made twice, the second racing the first's records).
func (z *zoner) build() {
	select {
	case <-z.recordsChanged:
	default:
	}
	in := z.view.input(nil)
	in.Nameservers, in.Hostmaster, in.UserZones, in.DefaultNSAddr = z.cfg.Nameservers, z.cfg.Hostmaster, z.cfg.UserZones, z.cfg.DefaultNSAddr
	var cat *authdns.Catalog
	var problems []authdns.Problem
	if z.serials != nil {
		cat, problems = z.serials.Build(in, z.served)
	} else {
		cat, problems = authdns.Build(in, z.local)
	}
	z.served = cat
	for _, p := range problems {
		z.log.Warn("not served in DNS", "name", p.Name, "problem", p.Message)
	}
	zones := &Zones{All: cat, Meshes: MeshCatalogs(in, cat)}
	for _, sink := range z.sinks {
		sink(zones)
	}
}
