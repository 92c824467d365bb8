package routerstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

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
	now  func() time.Time
}

// watched is what the writer follows of the store: Routers and Dataplanes, decoded.
type watched struct {
	item store.Item
	res  mesh.Resource // nil: it does not decode (skipped)
}

// Run writes the statuses until ctx ends: a list, then the store's changes and a readiness
// poll; every pass writes the statuses that differ from the stored ones (compared on the
// Router's version: a Router changed meanwhile is taken at its next version). A store that
// cannot be reached is retried; the statuses stay as they were (fail static).
func (w *Writer) Run(ctx context.Context) {
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	poll := cmpOr(w.Poll, DefaultPoll)
	defer w.Metrics.set(nil)
	for ctx.Err() == nil {
		byKey := map[store.Key]*watched{}
		its, _, rev, err := w.Store.List(ctx, "", "", "", 0)
		if err != nil {
			w.Log.Warn("router status: store unreachable; statuses stay as they were", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, it := range its {
			w.take(byKey, it)
		}
		w.follow(ctx, byKey, rev, poll)
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// take keeps a Router or Dataplane item, decoded.
func (w *Writer) take(byKey map[store.Key]*watched, it store.Item) bool {
	if it.Type != mesh.KindRouter && it.Type != mesh.KindDataplane {
		return false
	}
	wd := &watched{item: it}
	if rs, err := mesh.Decode(it.Key.String(), it.Doc); err == nil && len(rs) == 1 {
		rs[0].GetMeta().Mesh = it.Mesh
		wd.res = rs[0]
	}
	byKey[it.Key] = wd
	return true
}

// follow runs passes on the store's changes and the poll until the watch ends.
func (w *Writer) follow(ctx context.Context, byKey map[store.Key]*watched, rev int64, poll time.Duration) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := w.Store.Watch(wctx, rev)
	t := time.NewTicker(poll)
	defer t.Stop()
	m := w.members(byKey)
	w.pass(ctx, byKey, m)
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return
			}
			changed := false
			switch e.Type {
			case store.Put:
				changed = w.take(byKey, e.Item)
			case store.Delete:
				_, changed = byKey[e.Item.Key]
				delete(byKey, e.Item.Key)
			}
			if changed {
				m = nil // the members again at the next pass
			}
		case <-t.C:
			if m == nil {
				m = w.members(byKey)
			}
			w.pass(ctx, byKey, m)
		}
	}
}

// member is one replica of a router: the dataplane and the inbound its selector matched.
type member struct {
	dp      *mesh.Dataplane
	inbound int
}

// members are each router's replicas (by the router's key), found again only when a Router
// or a Dataplane changed: a pass asks the members' readiness alone.
func (w *Writer) members(byKey map[store.Key]*watched) map[store.Key][]member {
	dps := map[string][]*mesh.Dataplane{}
	for _, wd := range byKey {
		if dp, ok := wd.res.(*mesh.Dataplane); ok {
			dps[dp.Mesh] = append(dps[dp.Mesh], dp)
		}
	}
	out := map[store.Key][]member{}
	for k, wd := range byKey {
		rt, ok := wd.res.(*mesh.Router)
		if !ok {
			continue
		}
		ms := []member{}
		for _, dp := range dps[rt.Mesh] {
			if in, ok := rt.Replica(dp); ok {
				ms = append(ms, member{dp, in})
			}
		}
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.dp.Name, b.dp.Name) })
		out[k] = ms
	}
	return out
}

// pass computes every router's status and writes those that changed.
func (w *Writer) pass(ctx context.Context, byKey map[store.Key]*watched, members map[store.Key][]member) {
	counts := map[RouterKey]Counts{}
	for _, k := range slices.SortedFunc(maps.Keys(members), func(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }) {
		wd := byKey[k]
		rt := wd.res.(*mesh.Router)
		reps := make([]mesh.RouterReplica, 0, len(members[k]))
		for _, m := range members[k] {
			reps = append(reps, Replica(m.dp, m.inbound, w.Online))
		}
		st := Compute(rt, reps, rt.Status, w.now())
		counts[RouterKey{Mesh: rt.Mesh, Name: rt.Name}] = Counts{Desired: st.DesiredReplicas, Ready: st.ReadyReplicas, NotReady: len(reps) - st.ReadyReplicas}
		if same(st, rt.Status) {
			continue
		}
		w.write(ctx, byKey, wd, rt, st)
	}
	w.Metrics.set(counts)
}

func same(a, b *mesh.RouterStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// write stores rt with status st, compared on the version read.
func (w *Writer) write(ctx context.Context, byKey map[store.Key]*watched, wd *watched, rt *mesh.Router, st *mesh.RouterStatus) {
	next := *rt
	next.Status = st
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	it, err := w.Store.Put(wctx, wd.item.Key, mesh.EncodeJSON(&next), wd.item.Version)
	cancel()
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return // changed or deleted meanwhile: the watch brings it
	case err != nil:
		if ctx.Err() == nil {
			w.Log.Warn("router status not written; retried", "router", rt.Name, "mesh", rt.Mesh, "error", err)
		}
		return
	}
	if was := rt.Status; was == nil || was.ReadyReplicas != st.ReadyReplicas || len(was.Replicas) != len(st.Replicas) {
		w.Log.Info("router replicas", "router", rt.Name, "mesh", rt.Mesh, "ready", st.ReadyReplicas, "desired", st.DesiredReplicas, "replicas", len(st.Replicas))
	}
	w.take(byKey, it) // the watch brings it too: not written again meanwhile
}
