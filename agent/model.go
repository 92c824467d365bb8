package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// modelState is the last good model and what was made of it; read by the admin endpoint.
type modelState struct {
	mu       sync.RWMutex
	snap     *mesh.Snapshot
	table    *vipalloc.Table
	envoy    any
	envoyErr error
	loadedAt time.Time
}

func (m *modelState) get() (*mesh.Snapshot, *vipalloc.Table, any, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snap, m.table, m.envoy, m.envoyErr
}

// apply hands a loaded model to the parts: allocate, swap the DNS table, update Envoy.
// A model that cannot be used is refused (logged, counted) and the last good one stays.
func (a *Agent) apply(u cplink.Update) error {
	table, err := a.applyTable(u)
	if err != nil || table == nil {
		return err
	}
	a.applyEnvoy(u.Snapshot, table)
	return nil
}

// applyTable allocates the model's VIPs and swaps the DNS table; it returns a nil table
// when the model is unchanged. DNS answers from the new table before Envoy's resources are
// generated, so Envoy never delays an answer.
func (a *Agent) applyTable(u cplink.Update) (*vipalloc.Table, error) {
	start := time.Now()
	snap := u.Snapshot
	prev, _, _, _ := a.model.get()
	// The files refused are noted once the model is taken (unchanged, its zones, or whole):
	// a model refused here is not the one served, nor are its files.
	if prev != nil && snap.Hash != "" && snap.Hash == prev.Hash {
		a.noteRefusedFiles(u)
		a.markStale(u)
		a.metrics.reloads.WithLabelValues("unchanged").Inc()
		a.memory.settle() // what checking the sources allocated
		a.log.Debug("model unchanged", "trigger", u.Trigger, "hash", snap.Hash)
		return nil, nil
	}
	if prev != nil && snap.ModelHash != "" && snap.ModelHash == prev.ModelHash {
		// Only the route zones changed (a router replica's readiness, a user route): the
		// resolver takes them; VIPs and Envoy's resources stay as they are.
		a.swapZones(snap)
		a.model.mu.Lock()
		a.model.snap = snap
		a.model.mu.Unlock()
		a.noteRefusedFiles(u)
		a.markStale(u)
		a.metrics.reloads.WithLabelValues("zones").Inc()
		a.log.Debug("route zones applied", "trigger", u.Trigger, "zones", len(snap.DNSZones))
		return nil, nil
	}
	if err := a.checkIdentity(snap, prev); err != nil {
		a.refuse(u, err)
		return nil, err
	}
	restoreGC := allocationGC()
	table, err := a.parts.Allocator.Allocate(snap)
	restoreGC()
	if err != nil {
		err = fmt.Errorf("allocating VIPs: %w", err)
		a.refuse(u, err)
		return nil, err
	}
	a.parts.DNS.Swap(table)
	a.swapZones(snap)
	a.noteRefusedFiles(u)
	a.markStale(u)
	a.model.mu.Lock()
	a.model.snap, a.model.table, a.model.loadedAt = snap, table, time.Now()
	a.model.mu.Unlock()

	took := u.Took + time.Since(start)
	a.metrics.reloads.WithLabelValues("applied").Inc()
	a.metrics.reloadSeconds.Observe(took.Seconds())
	a.metrics.observeTable(table)
	// Loading leaves garbage (decoded text, the previous table), up to several times the
	// live model; the agent runs in every pod, so it is returned to the OS (now when it is
	// large, once the changes stop when small) rather than kept as heap headroom until the
	// next GC cycle that may never come.
	a.memory.settle()
	a.log.Info("model applied", "trigger", u.Trigger, "hash", snap.Hash, "dataplanes", len(snap.Dataplanes),
		"hostnames", table.Len(), "load", u.Took.Round(time.Microsecond), "took", took.Round(time.Microsecond))
	if f := snap.Self.KeptFields(); len(f) > 0 {
		a.log.Debug("this dataplane's Kuma fields accepted but not acted on (see docs/kuma-compatibility.md)",
			"dataplane", snap.Self.Name, "fields", f)
	}
	return table, nil
}

// markStale records whether the model now served is a saved one not yet confirmed by its
// source, and logs when the source confirms or replaces it.
func (a *Agent) markStale(u cplink.Update) {
	if was := a.stale.Swap(u.Stale); was && !u.Stale {
		a.log.Info("in sync with the control plane again: the saved model is replaced", "trigger", u.Trigger)
	}
}

// zoneSwapper is a resolver that answers the route zones (dnsserver.Server).
type zoneSwapper interface {
	SwapZones([]*mesh.DNSZone) error
}

// swapZones hands the model's route zones to the resolver; a zone that does not parse is
// left out (logged), the others are served.
func (a *Agent) swapZones(snap *mesh.Snapshot) {
	if zs, ok := a.parts.DNS.(zoneSwapper); ok {
		if err := zs.SwapZones(snap.DNSZones); err != nil {
			a.log.Warn("route zones from the control plane left out of DNS", "error", err)
		}
	}
}

// applyEnvoy generates and publishes Envoy's resources for a model already serving DNS.
// Refused resources leave Envoy with its last good ones.
func (a *Agent) applyEnvoy(snap *mesh.Snapshot, table *vipalloc.Table) {
	if a.parts.Envoy == nil {
		return
	}
	start := time.Now()
	resources, err := a.parts.Envoy.Update(snap, table)
	a.model.mu.Lock()
	if err == nil {
		a.model.envoy = resources
	}
	a.model.envoyErr = err
	a.model.mu.Unlock()
	if err != nil {
		a.log.Error("envoy resources refused; Envoy keeps the last good ones", "error", err)
		a.metrics.envoyFailures.Inc()
		return
	}
	a.envoyPublished.Store(true)
	a.log.Debug("envoy resources published", "hash", snap.Hash, "took", time.Since(start).Round(time.Microsecond))
}

// checkIdentity refuses a model whose dataplane is not the one this agent was told to run
// (--name, --mesh), or, when not told, not the one it runs as (prev's, the first model's):
// the work dir, its lock and the VIP state are that dataplane's, so another identity needs
// a restart.
func (a *Agent) checkIdentity(snap, prev *mesh.Snapshot) error {
	if snap == nil || snap.Self == nil {
		return errors.New("the model has no dataplane")
	}
	name, nameFrom := a.cfg.Dataplane.Name, "--name"
	meshName, meshFrom := a.cfg.Dataplane.Mesh, "--mesh"
	if prev != nil && prev.Self != nil {
		if name == "" {
			name, nameFrom = prev.Self.Name, "the dataplane this agent runs as"
		}
		if meshName == "" {
			meshName, meshFrom = prev.Mesh, "the mesh this agent runs in"
		}
	}
	restart := ""
	if prev != nil {
		restart = " (restart kuma-dp to run another dataplane)"
	}
	if name != "" && snap.Self.Name != name {
		return &mesh.FieldError{Source: snap.Self.Source.String(), Kind: mesh.KindDataplane, Name: snap.Self.Name,
			Path: "name", Value: snap.Self.Name, Msg: fmt.Sprintf("does not match %s %q%s", nameFrom, name, restart)}
	}
	if meshName != "" && snap.Mesh != meshName {
		return &mesh.FieldError{Source: snap.Self.Source.String(), Kind: mesh.KindDataplane, Name: snap.Self.Name,
			Path: "mesh", Value: snap.Mesh, Msg: fmt.Sprintf("does not match %s %q%s", meshFrom, meshName, restart)}
	}
	return nil
}

func (a *Agent) refuse(u cplink.Update, err error) {
	u.Err = err
	a.logRefusal(u)
	a.metrics.reloads.WithLabelValues("refused").Inc()
}

// logRefusal logs one line per problem, each naming file, field and value, so that the
// line a user greps for says where to look.
func (a *Agent) logRefusal(u cplink.Update) {
	msg := "change refused; the last good model keeps serving"
	if snap, _, _, _ := a.model.get(); snap == nil {
		msg = "model refused"
	}
	a.logErrors(msg, u.Trigger, u.Err)
}

// noteRefusedFiles logs the files an update carrying a model was built without (their
// newest content refused: see cplink.Update.Refused), each once for as long as it stays
// the same (another file refused beside it does not log it again), a file no longer
// refused while others stay so, and when every file is accepted again.
func (a *Agent) noteRefusedFiles(u cplink.Update) {
	a.refusedFiles.Store(int64(len(u.Refused)))
	seen := make(map[string]string, len(u.Refused))
	for _, f := range u.Refused {
		seen[f.Path] = fmt.Sprintf("%v %v %v", f.Kept, f.Narrowed, f.Err)
	}
	if len(seen) == 0 {
		if len(a.refusedSeen) > 0 {
			a.log.Info("every file accepted again", "trigger", u.Trigger)
		}
		a.refusedSeen = nil
		return
	}
	for _, p := range slices.Sorted(maps.Keys(a.refusedSeen)) {
		if _, ok := seen[p]; !ok {
			a.log.Info("file no longer refused (accepted again, or gone)", "trigger", u.Trigger, "file", p)
		}
	}
	for _, f := range u.Refused {
		if a.refusedSeen[f.Path] == seen[f.Path] {
			continue
		}
		msg := "file refused; its last good version keeps serving"
		switch {
		case f.Kept && f.Narrowed:
			msg = "file refused; its last good version keeps serving, without its dataplanes of the services reachable since (it was kept for another list)"
		case !f.Kept:
			msg = "file refused; left out of the model (no version of it was accepted yet)"
		}
		a.logErrors(msg, u.Trigger, f.Err)
	}
	a.refusedSeen = seen
}

// logErrors logs err under msg, a line per problem when it holds mesh errors.
func (a *Agent) logErrors(msg, trigger string, err error) {
	var errs mesh.Errors
	var one *mesh.FieldError
	switch {
	case errors.As(err, &errs):
	case errors.As(err, &one):
		errs = mesh.Errors{one}
	default:
		a.log.Error(msg, "trigger", trigger, "error", err)
		return
	}
	for _, e := range errs {
		attrs := []any{"trigger", trigger, "file", e.Source}
		if e.Path != "" {
			attrs = append(attrs, "field", e.Path)
		}
		if e.Kind != "" {
			attrs = append(attrs, "resource", e.Kind+"/"+e.Name)
		}
		if e.Value != "" {
			attrs = append(attrs, "value", errtext.Clip(e.Value, 200)) // never a whole multi-KB value
		}
		attrs = append(attrs, slog.String("error", e.Error()))
		a.log.Error(msg, attrs...)
	}
}
