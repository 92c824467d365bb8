package cplink

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The control-plane link saves the models it accepted to ClientConfig.ModelFile (in the
// work dir), so that an agent restarted while its control plane is unreachable serves DNS
// (and Envoy) from its last good model at once, marked stale, instead of answering
// nothing until the control plane is back. The first complete sync replaces it.

// The model file is a gob stream, written and read a piece at a time (as the decode cache
// is): a savedHeader, then the resources in chunks of at most CacheChunk. The resources are
// the last delivered model's (its snapshot's, the dataplane's own included), listed when
// the file is written: the link keeps no list of them beside the model. Build ties the
// file to the binary.
type savedHeader struct {
	Build string
	Name  string
	Mesh  string
	Saved time.Time
	Count int // resources that follow
}

// saveInterval is the least time between two writes of the model file. Each write encodes
// the whole model (100,000 dataplanes: ~20 MB, which the decode cache took ~80 ms to
// encode when it was one file: BenchmarkPersistOneChange), so a burst of
// changes (a rolling deployment) writes the first and then the newest every saveInterval,
// not one file per change; the newest is written when the link stops too.
const saveInterval = 10 * time.Second

// saveLoop writes the newest model handed to c.saveq until ctx ends, then the one still
// waiting, if any; a model superseded before its turn is never written.
func (c *Client) saveLoop(ctx context.Context) {
	var pending *mesh.Snapshot
	var last time.Time
	var failing bool
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	save := func() {
		c.saveSnapshot(pending, &failing)
		pending, last = nil, time.Now()
	}
	for {
		select {
		case <-ctx.Done():
			if pending != nil {
				save()
			}
			return
		case snap := <-c.saveq:
			pending = snap
			if d := time.Until(last.Add(saveInterval)); d > 0 {
				wait.Reset(d)
				continue
			}
			save()
		case <-wait.C:
			if pending != nil {
				save()
			}
		}
	}
}

// saveSnapshot writes snap to the model file. A failure is counted (ModelSaveFailures) and
// logged once per episode: failing says one was logged and no save succeeded since; the
// first save that succeeds after it is logged too.
func (c *Client) saveSnapshot(snap *mesh.Snapshot, failing *bool) {
	err := c.saveModel(snapshotResources(snap))
	c.saves.Add(1)
	switch {
	case err != nil:
		c.saveFailures.Add(1)
		if !*failing {
			c.log.Warn("cannot save the model for a restart without the control plane: a restart during an outage would serve an older model; "+
				"counted in kuma_dp_model_save_failures_total, logged again when a save succeeds",
				"path", c.cfg.ModelFile, "error", err)
		}
		*failing = true
	case *failing:
		c.log.Info("the model is saved again for a restart without the control plane", "path", c.cfg.ModelFile)
		*failing = false
	}
}

// ModelSaveFailures counts the writes of the model file that failed since the start.
func (c *Client) ModelSaveFailures() uint64 { return c.saveFailures.Load() }

// saveModel writes rs to the model file (atomically, owner-only).
func (c *Client) saveModel(rs []mesh.Resource) error {
	h := savedHeader{Build: BuildID(), Name: c.cfg.Name, Mesh: c.cfg.Mesh, Saved: time.Now(), Count: len(rs)}
	return WriteCacheStream(c.cfg.ModelFile, ".cp-model-*", func(enc *gob.Encoder) error {
		if err := enc.Encode(h); err != nil {
			return err
		}
		for chunk := range slices.Chunk(rs, CacheChunk) {
			if err := enc.Encode(chunk); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshotResources lists snap's resources, kind after kind (what a saved model holds).
func snapshotResources(snap *mesh.Snapshot) []mesh.Resource {
	var rs []mesh.Resource
	for _, kind := range Kinds {
		for r := range snap.Resources(kind) {
			rs = append(rs, r)
		}
	}
	return rs
}

// queueSave hands a delivered model to saveLoop, replacing one not written yet.
func (c *Client) queueSave(snap *mesh.Snapshot) {
	if c.cfg.ModelFile == "" {
		return
	}
	for {
		select {
		case c.saveq <- snap:
			return
		default:
		}
		select {
		case <-c.saveq: // drop the older one
		default:
		}
	}
}

// loadSaved builds the model saved by an earlier run, or says why it cannot.
func (c *Client) loadSaved() (*mesh.Snapshot, time.Time, error) {
	if c.cfg.ModelFile == "" {
		return nil, time.Time{}, errors.New("no model file")
	}
	if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(c.cfg.ModelFile), ".cp-model-*")); len(stale) > 0 {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	f, err := os.Open(c.cfg.ModelFile)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	dec := gob.NewDecoder(bufio.NewReaderSize(f, 64<<10))
	var h savedHeader
	if err := dec.Decode(&h); err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", c.cfg.ModelFile, err)
	}
	switch {
	case h.Build != BuildID():
		return nil, time.Time{}, fmt.Errorf("%s was saved by another kuma-dp build", c.cfg.ModelFile)
	case h.Name != c.cfg.Name || h.Mesh != c.cfg.Mesh:
		return nil, time.Time{}, fmt.Errorf("%s is the model of dataplane %s/%s, not %s/%s", c.cfg.ModelFile, h.Mesh, h.Name, c.cfg.Mesh, c.cfg.Name)
	}
	if h.Count < 0 {
		return nil, time.Time{}, fmt.Errorf("%s is damaged: it announces %d resources", c.cfg.ModelFile, h.Count)
	}
	// The count is the file's word only: the slice grows with what is read, so a damaged
	// count is a short read below, not an allocation of that size.
	rs := make([]mesh.Resource, 0, min(h.Count, 1<<16))
	for len(rs) < h.Count {
		var chunk []mesh.Resource
		if err := dec.Decode(&chunk); err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %w", c.cfg.ModelFile, err)
		}
		if len(chunk) == 0 || len(rs)+len(chunk) > h.Count {
			return nil, time.Time{}, fmt.Errorf("%s holds more resources than announced", c.cfg.ModelFile)
		}
		rs = append(rs, chunk...)
	}
	mesh.Settle(rs)
	self := c.self
	for _, r := range rs {
		if dp, ok := r.(*mesh.Dataplane); ok && self == nil && dp.Name == c.cfg.Name {
			self = dp
		}
	}
	if self == nil {
		return nil, time.Time{}, fmt.Errorf("%s holds no Dataplane %q", c.cfg.ModelFile, c.cfg.Name)
	}
	snap, err := mesh.NewSnapshot(self, rs)
	return snap, h.Saved, err
}
