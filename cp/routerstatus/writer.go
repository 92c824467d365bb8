package routerstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/decoded"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// DefaultPoll is how often the writer asks whether a replica's readiness changed.
const DefaultPoll = 100 * time.Millisecond

// Writer keeps every Router's status in step with its replicas; it runs on the leader
// only (one writer, so statuses never flap between two views of readiness).
type Writer struct {
	Store  store.Store
	Online Online
	Log    *slog.Logger
	// Metrics, when set, holds the replicas counted at every pass (kuma_cp_router_replicas).
	Metrics *Metrics
	// Poll is how often readiness is asked (DefaultPoll when 0).
	Poll time.Duration
	// OnlineKnown, when set, says whether Online knows every replica's agents yet (the
	// other control-plane replicas' were read): no status is written before, so a leader
	// just started never takes the others' agents for gone.
	OnlineKnown func() bool
}

// watched is what the writer follows of the store: the Routers, and the Dataplanes that a
// Router selects (the others are not kept: a large mesh's dataplanes cost the leader
// nothing here).
type watched struct {
	routers map[store.Key]*router
	dps     map[store.Key]*mesh.Dataplane
}

// router is a stored Router, decoded, with the item it was read from.
type router struct {
	item store.Item
	rt   *mesh.Router
}

// selects reports whether any router selects dp.
func (wd *watched) selects(dp *mesh.Dataplane) bool {
	for _, r := range wd.routers {
		if _, ok := r.rt.Replica(dp); ok && r.rt.Mesh == dp.Mesh {
			return true
		}
	}
	return false
}

// selecting reports whether a router of mesh m selects dataplanes.
func (wd *watched) selecting(m string) bool {
	for _, r := range wd.routers {
		if r.rt.Mesh == m && len(r.rt.Dataplanes) > 0 {
			return true
		}
	}
	return false
}

// Run writes the statuses until ctx ends: a list, then the store's changes and a readiness
// poll; every pass writes the statuses that differ from the stored ones (compared on the
// Router's version: a Router changed meanwhile is taken at its next version). A store that
// cannot be reached is retried; the statuses stay as they were (fail static).
func (w *Writer) Run(ctx context.Context) {
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	poll := w.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	defer w.Metrics.set(nil)
	for ctx.Err() == nil {
		wd, rev, err := w.read(ctx)
		if err != nil {
			w.Log.Warn("router status: store unreachable; statuses stay as they were", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		w.follow(ctx, wd, rev, poll)
	}
}

// read lists what the writer follows: the whole store when another follower is listing it
// anyway (a replica's start: one list, each document decoded once between them), else the
// Routers, then the Dataplanes of the meshes where a Router selects dataplanes - a leader
// elected later, or a Router new, reads no other mesh's dataplanes. It returns the revision to
// watch from: the first list's (a change after it is taken again: the same result).
func (w *Writer) read(ctx context.Context) (*watched, int64, error) {
	wd := &watched{routers: map[store.Key]*router{}, dps: map[store.Key]*mesh.Dataplane{}}
	defer store.ListDone() // the documents are not kept: their memory returned to the system
	its, rev, joined, err := store.ListUnderWay(ctx, w.Store)
	if !joined {
		its, _, rev, err = w.Store.List(ctx, "", mesh.KindRouter, "", 0)
	}
	if err != nil {
		return nil, 0, err
	}
	for _, it := range its { // the routers first: they say which dataplanes to keep
		if it.Type == mesh.KindRouter {
			w.take(wd, it)
		}
	}
	if joined {
		for _, it := range its {
			if it.Type != mesh.KindRouter {
				w.take(wd, it)
			}
		}
		return wd, rev, nil
	}
	meshes := map[string]bool{}
	for _, r := range wd.routers {
		if len(r.rt.Dataplanes) > 0 {
			meshes[r.rt.Mesh] = true
		}
	}
	for m := range meshes {
		dps, _, _, err := w.Store.List(ctx, m, mesh.KindDataplane, "", 0)
		if err != nil {
			return nil, 0, err
		}
		for _, it := range dps {
			w.take(wd, it)
		}
	}
	return wd, rev, nil
}

// decode is a stored resource of one kind, decoded (nil when it does not decode), shared
// with the store's other followers (package decoded): read, never changed.
func decode[T mesh.Resource](it store.Item) T {
	r, _ := decoded.As[T](it)
	return r
}

// take keeps a Router, or a Dataplane a router selects. It reports whether the members may
// have changed, and whether the dataplanes must be read again (a router new, or selecting
// others: the dataplanes not kept may be its).
func (w *Writer) take(wd *watched, it store.Item) (changed, relist bool) {
	switch it.Type {
	case mesh.KindRouter:
		rt := decode[*mesh.Router](it)
		old := wd.routers[it.Key]
		if rt == nil {
			delete(wd.routers, it.Key)
			return old != nil, false
		}
		wd.routers[it.Key] = &router{item: it, rt: rt}
		return true, old == nil || old.rt.Dataplanes.String() != rt.Dataplanes.String()
	case mesh.KindDataplane:
		_, had := wd.dps[it.Key]
		if !wd.selecting(it.Mesh) { // none can select it: not decoded
			decoded.Pass(it)
			delete(wd.dps, it.Key)
			return had, false
		}
		if dp := decode[*mesh.Dataplane](it); dp != nil && wd.selects(dp) {
			wd.dps[it.Key] = dp
			return true, false
		}
		delete(wd.dps, it.Key)
		return had, false
	}
	decoded.Pass(it) // not read here: the other followers' to decode
	return false, false
}

// follow runs passes on the store's changes and the poll until the watch ends, or a router
// new or selecting other dataplanes wants them read again.
func (w *Writer) follow(ctx context.Context, wd *watched, rev int64, poll time.Duration) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := w.Store.Watch(wctx, rev)
	t := time.NewTicker(poll)
	defer t.Stop()
	m := w.members(wd)
	w.pass(ctx, wd, m)
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return
			}
			changed, relist := false, false
			switch e.Type {
			case store.Put:
				changed, relist = w.take(wd, e.Item)
			case store.Delete:
				_, r := wd.routers[e.Item.Key]
				_, d := wd.dps[e.Item.Key]
				changed = r || d
				delete(wd.routers, e.Item.Key)
				delete(wd.dps, e.Item.Key)
			}
			if relist {
				return
			}
			if changed {
				m = nil // the members again at the next pass
			}
		case <-t.C:
			if m == nil {
				m = w.members(wd)
			}
			w.pass(ctx, wd, m)
		}
	}
}

// member is one replica of a router: the dataplane and the inbound its selector matched.
type member struct {
	dp      *mesh.Dataplane
	inbound int
}

// members are a router's replicas.
type members struct {
	key store.Key
	ms  []member
}

// members are each router's replicas, by router key, found again only when a Router or a
// Dataplane changed: a pass asks the members' readiness alone.
func (w *Writer) members(wd *watched) []members {
	out := make([]members, 0, len(wd.routers))
	for k, r := range wd.routers {
		ms := []member{}
		for _, dp := range wd.dps {
			if in, ok := r.rt.Replica(dp); ok && dp.Mesh == r.rt.Mesh {
				ms = append(ms, member{dp, in})
			}
		}
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.dp.Name, b.dp.Name) })
		out = append(out, members{k, ms})
	}
	slices.SortFunc(out, func(a, b members) int { return strings.Compare(a.key.String(), b.key.String()) })
	return out
}

// pass computes every router's status and writes those that changed. A router whose
// replicas and desired count are as its status says is not computed again: most passes
// find nothing changed.
func (w *Writer) pass(ctx context.Context, wd *watched, all []members) {
	if w.OnlineKnown != nil && !w.OnlineKnown() {
		return
	}
	counts := make(map[RouterKey]Counts, len(all))
	reps := []mesh.RouterReplica{}
	for _, rm := range all {
		r := wd.routers[rm.key]
		reps = reps[:0]
		ready := 0
		for _, m := range rm.ms {
			rep := Replica(m.dp, m.inbound, w.Online)
			if rep.Ready {
				ready++
			}
			reps = append(reps, rep)
		}
		desired := r.rt.DesiredReplicas()
		counts[RouterKey{Mesh: r.rt.Mesh, Name: r.rt.Name}] = Counts{Desired: desired, Ready: ready, NotReady: len(reps) - ready}
		if old := r.rt.Status; old != nil && len(reps) > 0 && old.DesiredReplicas == desired && old.ReadyReplicas == ready &&
			slices.Equal(old.Replicas, reps) && holds(old, mesh.ConditionAvailable, ready > 0) && holds(old, mesh.ConditionDegraded, ready < desired) {
			continue
		}
		st := Compute(r.rt, slices.Clone(reps), r.rt.Status, time.Now())
		if !same(st, r.rt.Status) {
			w.write(ctx, wd, r, st)
		}
	}
	w.Metrics.set(counts)
}

// holds reports whether s has the condition typ with the status want.
func holds(s *mesh.RouterStatus, typ string, want bool) bool {
	c := s.Condition(typ)
	return c != nil && (c.Status == "True" && want || c.Status == "False" && !want)
}

func same(a, b *mesh.RouterStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// write stores the router with status st, compared on the version read.
func (w *Writer) write(ctx context.Context, wd *watched, r *router, st *mesh.RouterStatus) {
	next := *r.rt
	next.Status = st
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	it, err := w.Store.Put(wctx, r.item.Key, mesh.EncodeJSON(&next), r.item.Version)
	cancel()
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return // changed or deleted meanwhile: the watch brings it
	case err != nil:
		if ctx.Err() == nil {
			w.Log.Warn("router status not written; retried", "router", r.rt.Name, "mesh", r.rt.Mesh, "error", err)
		}
		return
	}
	if was := r.rt.Status; was == nil || was.ReadyReplicas != st.ReadyReplicas || len(was.Replicas) != len(st.Replicas) {
		w.Log.Info("router replicas", "router", r.rt.Name, "mesh", r.rt.Mesh, "ready", st.ReadyReplicas, "desired", st.DesiredReplicas, "replicas", len(st.Replicas))
	}
	// taken as written, not decoded back: the watch brings it too, not written again meanwhile
	wd.routers[it.Key] = &router{item: it, rt: &next}
}
