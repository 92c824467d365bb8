package cplink

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The control-plane link saves every model it accepted to ClientConfig.ModelFile (in the
// work dir), so that an agent restarted while its control plane is unreachable serves DNS
// (and Envoy) from its last good model at once, marked stale, instead of answering
// nothing until the control plane is back. The first complete sync replaces it.

// savedModel is the model file's content: the resources of the last accepted model, as
// the link holds them (the dataplane's own resource included when it came from the control
// plane). Build ties it to the binary, as the decode cache is.
type savedModel struct {
	Build     string
	Name      string
	Mesh      string
	Saved     time.Time
	Resources []mesh.Resource
}

// saveLoop writes the newest model handed to c.saveq until ctx ends; a model superseded
// before its turn is never written.
func (c *Client) saveLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case rs := <-c.saveq:
			m := savedModel{Build: BuildID(), Name: c.cfg.Name, Mesh: c.cfg.Mesh, Saved: time.Now(), Resources: rs}
			if err := WriteCacheFile(c.cfg.ModelFile, ".cp-model-*", m); err != nil {
				c.log.Warn("cannot save the model for a restart without the control plane", "path", c.cfg.ModelFile, "error", err)
			}
		}
	}
}

// queueSave hands rs to saveLoop, replacing a model not written yet.
func (c *Client) queueSave(rs []mesh.Resource) {
	if c.cfg.ModelFile == "" {
		return
	}
	for {
		select {
		case c.saveq <- rs:
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
	var m savedModel
	if err := gob.NewDecoder(bufio.NewReader(f)).Decode(&m); err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", c.cfg.ModelFile, err)
	}
	switch {
	case m.Build != BuildID():
		return nil, time.Time{}, fmt.Errorf("%s was saved by another kuma-dp build", c.cfg.ModelFile)
	case m.Name != c.cfg.Name || m.Mesh != c.cfg.Mesh:
		return nil, time.Time{}, fmt.Errorf("%s is the model of dataplane %s/%s, not %s/%s", c.cfg.ModelFile, m.Mesh, m.Name, c.cfg.Mesh, c.cfg.Name)
	}
	self := c.self
	var rs []mesh.Resource
	for _, r := range m.Resources {
		if dp, ok := r.(*mesh.Dataplane); ok && self == nil && dp.Name == c.cfg.Name {
			self = dp
		}
		rs = append(rs, r)
	}
	if self == nil {
		return nil, time.Time{}, fmt.Errorf("%s holds no Dataplane %q", c.cfg.ModelFile, c.cfg.Name)
	}
	snap, err := mesh.NewSnapshot(self, rs)
	return snap, m.Saved, err
}
