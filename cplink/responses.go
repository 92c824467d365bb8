package cplink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

func (c *Client) versionsLocked(kind string) map[string]string {
	held := c.held[kind]
	if len(held) == 0 {
		return nil
	}
	out := make(map[string]string, len(held))
	for name, h := range held {
		out[name] = h.version
	}
	return out
}

// handle applies one response and returns its ACK, or its NACK when a resource does not
// decode and validate or the model does not build; the last good model stays either way.
func (c *Client) handle(ctx context.Context, resp *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryRequest {
	start := time.Now()
	c.stats.Responses.Add(1)
	c.stats.BytesReceived.Add(int64(proto.Size(resp))) // as received: compressed or not
	ack := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	kind := KindOf(resp.GetTypeUrl())
	if kind == "" {
		return c.nack(ack, fmt.Errorf("type URL %q is not one of the link's", resp.GetTypeUrl()))
	}
	if err := gunzipResources(resp, c.maxGunzip); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.refused[kind] = true
		return c.nack(ack, fmt.Errorf("control plane %s response: %w", kind, err))
	}
	c.stats.Resources.Add(int64(len(resp.GetResources())))
	changes, errs := decodeChanges(kind, resp)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(errs) > 0 {
		c.refused[kind] = true
		return c.nack(ack, errs)
	}
	e := c.applyLocked(kind, changes)
	c.received[kind] = true
	if len(c.received) < len(Kinds) {
		return ack // not yet a complete model
	}
	snap, err := c.buildLocked()
	if errors.Is(err, errNoSelf) {
		c.refetchLocked(kind)
		return ack // the model is fine; this dataplane is not in it yet
	}
	if err != nil {
		e.undo()
		c.refused[kind] = true
		return c.nack(ack, err)
	}
	c.emitLocked(ctx, snap, "cp", start)
	c.refetchLocked(kind)
	return ack
}

// heldUpdate is one resource of a response: its new version, or its removal.
type heldUpdate struct {
	name string
	h    heldResource
	gone bool
}

// decodeChanges decodes the resources of a response of kind, its removals first; errs
// names every resource that does not decode or validate.
func decodeChanges(kind string, resp *discovery.DeltaDiscoveryResponse) (changes []heldUpdate, errs mesh.Errors) {
	changes = make([]heldUpdate, 0, len(resp.GetRemovedResources())+len(resp.GetResources()))
	for _, name := range resp.GetRemovedResources() {
		changes = append(changes, heldUpdate{name: name, gone: true})
	}
	for _, r := range resp.GetResources() {
		var env wrapperspb.BytesValue
		if r.GetResource() == nil || proto.Unmarshal(r.GetResource().GetValue(), &env) != nil {
			errs = append(errs, &mesh.FieldError{Source: "control plane " + kind + "/" + r.GetName(), Kind: kind, Name: r.GetName(),
				Msg: "the envelope is not a google.protobuf.BytesValue"})
			continue
		}
		res, err := DecodeResource(kind, r.GetName(), env.GetValue())
		if err != nil {
			errs = mesh.AppendErrors(errs, err)
			continue
		}
		changes = append(changes, heldUpdate{name: r.GetName(), h: heldResource{version: r.GetVersion(), res: res}})
	}
	return changes, errs
}

// heldEdit is a response being applied to what the link holds of a kind, in place (a
// mesh's worth of dataplanes is not copied for each change), noting what it replaced so
// that a model that does not build is undone.
type heldEdit struct {
	c       *Client
	kind    string
	held    map[string]heldResource
	changes []heldChange
	prevKey string // the client's reachKey before
}

// applyLocked applies changes to what the link holds of kind (and, for dataplanes, drops
// those no longer reachable) and returns the edit, to undo it.
func (c *Client) applyLocked(kind string, changes []heldUpdate) *heldEdit {
	held := c.held[kind]
	if held == nil {
		held = map[string]heldResource{}
		c.held[kind] = held
	}
	e := &heldEdit{c: c, kind: kind, held: held, prevKey: c.reachKey}
	names := make([]string, 0, len(changes))
	for _, ch := range changes {
		e.set(ch.name, ch.h, ch.gone)
		names = append(names, ch.name)
	}
	if kind == mesh.KindDataplane {
		c.keepReachableLocked(held, names, e.set)
	}
	return e
}

// set holds h as name (or removes name when gone), noting what it replaces.
func (e *heldEdit) set(name string, h heldResource, gone bool) {
	old, had := e.held[name]
	e.changes = append(e.changes, heldChange{name: name, h: old, had: had})
	if gone {
		delete(e.held, name)
	} else {
		e.held[name] = h
	}
	e.c.changedLocked(e.kind, name)
}

// undo puts back what the edit replaced, last change first.
func (e *heldEdit) undo() {
	for i := len(e.changes) - 1; i >= 0; i-- {
		if u := e.changes[i]; u.had {
			e.held[u.name] = u.h
		} else {
			delete(e.held, u.name)
		}
	}
	e.c.reachKey = e.prevKey
}

// refetchLocked ends the session when kind had a response refused on this stream (see
// Client.refused), now that one is accepted.
func (c *Client) refetchLocked(kind string) {
	if c.refused[kind] && c.cancelSession != nil {
		delete(c.refused, kind)
		c.cancelSession(errRefetch)
	}
}

func (c *Client) nack(ack *discovery.DeltaDiscoveryRequest, err error) *discovery.DeltaDiscoveryRequest {
	c.stats.Nacks.Add(1)
	c.log.Warn("refused a change from the control plane (NACK); keeping the last good model",
		"type_url", ack.GetTypeUrl(), "error", err.Error())
	ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	return ack
}

var errNoSelf = errors.New("this dataplane is not at the control plane")

// keepReachableLocked drops from dps (the held dataplanes) those of services this
// dataplane does not reach (Kuma's transparentProxying.reachableServices), keeping their
// versions: among names, those just changed, or among all when the list changed (names
// nil: all). Each change goes through set (which notes it), deletions included. When the
// list changed since the held dataplanes were kept, those dropped for the old list are
// forgotten and the session ends: the next stream, without their versions, brings the ones
// the new list reaches.
func (c *Client) keepReachableLocked(dps map[string]heldResource, names []string, set func(name string, h heldResource, gone bool)) {
	self := c.self
	if self == nil {
		h, ok := dps[c.cfg.Name]
		if !ok || h.res == nil {
			return // the list is not known yet: everything is kept
		}
		self = h.res.(*mesh.Dataplane)
	}
	reach := mesh.ReachOf(self)
	if key := reach.Key(); key != c.reachKey {
		dropped := false
		for name, h := range dps {
			if h.res == nil {
				set(name, h, true)
				dropped = true
			}
		}
		if dropped && c.cancelSession != nil {
			c.cancelSession(errResync)
		}
		c.reachKey = key
		names = nil
	}
	if reach == nil {
		return
	}
	keep := func(name string, h heldResource) {
		if h.res != nil && !reach.Keeps(h.res.(*mesh.Dataplane)) {
			set(name, heldResource{version: h.version}, false)
		}
	}
	if names == nil {
		for name, h := range dps {
			keep(name, h)
		}
		return
	}
	for _, name := range names {
		if h, ok := dps[name]; ok {
			keep(name, h)
		}
	}
}

// heldChange is what a held resource was before a response changed it (had: there was one).
type heldChange struct {
	name string
	h    heldResource
	had  bool
}

// changedLocked notes that kind/name changed since the last model built.
func (c *Client) changedLocked(kind, name string) {
	if c.changed == nil {
		c.changed = map[string]map[string]struct{}{}
	}
	m := c.changed[kind]
	if m == nil {
		m = map[string]struct{}{}
		c.changed[kind] = m
	}
	m[name] = struct{}{}
}

// buildLocked builds the model from what the link holds, with mesh.NewSnapshot's rules.
// The resources go to the builder in the last model's order, the changed ones after them,
// so its sort has next to nothing to do (a map's order cost a full sort of every name).
func (c *Client) buildLocked() (*mesh.Snapshot, error) {
	self := c.self
	if self == nil {
		h, ok := c.held[mesh.KindDataplane][c.cfg.Name]
		if !ok {
			if !c.noSelf {
				c.noSelf = true
				c.log.Warn("waiting for this dataplane's own Dataplane at the control plane (or give --dataplane-file)",
					"name", c.cfg.Name, "mesh", c.cfg.Mesh)
			}
			return nil, errNoSelf
		}
		self = h.res.(*mesh.Dataplane)
	}
	c.noSelf = false
	n := 0
	for _, kind := range Kinds {
		n += len(c.held[kind])
	}
	rs := make([]mesh.Resource, 0, n)
	if last := c.lastSnap; last != nil && last.Self == self {
		// Unchanged resources are the last model's (held as they were: every change to
		// what the link holds is noted in c.changed), merged in name order with the
		// changed ones; the last model left out what its self's mesh and reachable
		// services leave out, and self is the same.
		for _, kind := range Kinds {
			changed := make([]string, 0, len(c.changed[kind]))
			for name := range c.changed[kind] {
				changed = append(changed, name)
			}
			slices.Sort(changed)
			var news []mesh.Resource // the changed ones still held, in name order
			for _, name := range changed {
				if h, ok := c.held[kind][name]; ok && h.res != nil {
					news = append(news, h.res)
				}
			}
			for r := range last.Resources(kind) {
				name := mesh.StoreName(r) // the name it is held under (a route's name.namespace)
				for len(news) > 0 && mesh.StoreName(news[0]) < name {
					rs, news = append(rs, news[0]), news[1:]
				}
				for len(changed) > 0 && changed[0] < name {
					changed = changed[1:]
				}
				if len(changed) > 0 && changed[0] == name {
					continue // held anew (in news) or gone
				}
				rs = append(rs, r)
			}
			rs = append(rs, news...)
		}
	} else {
		for _, kind := range Kinds {
			for _, h := range c.held[kind] {
				if h.res != nil {
					rs = append(rs, h.res)
				}
			}
		}
	}
	snap, err := c.builder.Build(self, rs)
	if err == nil {
		c.lastSnap, c.changed = snap, nil
	}
	return snap, err
}

// emitLocked hands a model to Load or Run, unless it is the one already delivered (a
// resumed stream with nothing changed).
func (c *Client) emitLocked(ctx context.Context, snap *mesh.Snapshot, trigger string, start time.Time) {
	if c.sent && snap.Hash == c.lastHash {
		c.log.Debug("in sync with the control plane; nothing changed")
		return
	}
	if !c.sent {
		trigger = "start"
	}
	select {
	case c.updates <- Update{Snapshot: snap, Trigger: trigger, Took: time.Since(start)}:
		c.sent = true
		c.lastHash = snap.Hash
		c.queueSave(snap)
		if trigger == "start" {
			c.log.Info("first complete sync with the control plane", "dataplanes", len(snap.Dataplanes),
				"virtual_outbounds", len(snap.VirtualOutbounds), "traffic_routes", len(snap.TrafficRoutes))
		}
	case <-ctx.Done():
	}
}

// rebuild re-reads the dataplane file and rebuilds the model (SIGHUP).
func (c *Client) rebuild(ctx context.Context) {
	c.mu.Lock()
	sent := c.sent
	c.mu.Unlock()
	if !sent {
		return // nothing complete to rebuild yet; Load is still waiting for the first sync
	}
	if c.cfg.DataplaneFile != "" {
		if err := c.loadSelf(); err != nil {
			c.send(ctx, Update{Err: err, Trigger: "reload"})
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if dps := c.held[mesh.KindDataplane]; dps != nil {
		// the dataplane file may list other reachable services now
		c.keepReachableLocked(dps, nil, func(name string, h heldResource, gone bool) {
			if gone {
				delete(dps, name)
			} else {
				dps[name] = h
			}
			c.changedLocked(mesh.KindDataplane, name)
		})
	}
	snap, err := c.buildLocked()
	if errors.Is(err, errNoSelf) {
		return
	}
	if err != nil {
		c.send(ctx, Update{Err: err, Trigger: "reload"})
		return
	}
	c.lastHash = "" // a reload always delivers
	c.emitLocked(ctx, snap, "reload", time.Now())
}

func (c *Client) send(ctx context.Context, u Update) {
	select {
	case c.updates <- u:
	case <-ctx.Done():
	}
}
