package cplink

import (
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The model saved for a restart without the control plane reads back as the same model,
// written and read in pieces; a file cut short, of another dataplane, or without this
// dataplane is refused with the reason.
func TestSavedModelRoundTrip(t *testing.T) {
	var sb strings.Builder
	for i := range 1500 { // several chunks
		fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: svc%d\nnetworking:\n  address: 10.9.9.9\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: svc%d\n---\n", i, i)
	}
	rs, err := mesh.Decode("inventory.yaml", []byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cp-model.gob")
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "svc7", Mesh: "default", ModelFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.saveModel(rs); err != nil {
		t.Fatal(err)
	}
	snap, saved, err := c.loadSaved()
	if err != nil {
		t.Fatal(err)
	}
	want, err := mesh.NewSnapshot(rs[7].(*mesh.Dataplane), rs)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Hash != want.Hash || len(snap.Dataplanes) != len(rs) || snap.Self.Name != "svc7" || saved.IsZero() {
		t.Fatalf("read back: hash %s want %s, %d dataplanes, self %s, saved %v", snap.Hash, want.Hash, len(snap.Dataplanes), snap.Self.Name, saved)
	}

	other, _ := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "svc7", Mesh: "other", ModelFile: path}, nil)
	if _, _, err := other.loadSaved(); err == nil || !strings.Contains(err.Error(), "not other/svc7") {
		t.Errorf("another mesh's model: %v", err)
	}
	missing, _ := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "nobody", Mesh: "default", ModelFile: path}, nil)
	if err := missing.saveModel(rs); err != nil {
		t.Fatal(err)
	}
	if _, _, err := missing.loadSaved(); err == nil || !strings.Contains(err.Error(), `no Dataplane "nobody"`) {
		t.Errorf("a model without this dataplane: %v", err)
	}
	if err := c.saveModel(rs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.loadSaved(); err == nil {
		t.Error("a model file cut short was read")
	}
}

// A saved model whose header is damaged (a resource count no file holds) is refused with
// the reason; it made the agent panic at start (a slice of that capacity).
func TestSavedModelDamagedCountRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp-model.gob")
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "svc7", Mesh: "default", ModelFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, count := range []int{-3, 1 << 40, 1 << 62} {
		h := savedHeader{Build: BuildID(), Name: "svc7", Mesh: "default", Saved: time.Now(), Count: count}
		if err := WriteCacheStream(path, ".cp-model-*", func(enc *gob.Encoder) error { return enc.Encode(h) }); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.loadSaved(); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("count %d: %v, want an error naming the file", count, err)
		}
	}
}
