package cplink

import (
	"encoding/gob"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
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

// controlPlaneOnly are examples of the kinds no file holds (the control plane builds them),
// for TestSavedModelKeepsEveryKind; every other kind's example comes from testdata.
var controlPlaneOnly = map[string]string{
	mesh.KindDNSZone: "type: DNSZone\nname: shard-a.apps.example.com\norigin: shard-a.apps.example.com\nzone: |\n" +
		"  $ORIGIN shard-a.apps.example.com.\n  @ 30 IN SOA ns.shard-a.apps.example.com. h.shard-a.apps.example.com. 7 300 60 1209600 30\n" +
		"  * 30 IN A 10.1.0.1\n",
}

// kindExamples finds a resource of every kind the link carries: the first of each kind in
// the repository's testdata (decoded as the link decodes), else in controlPlaneOnly. A kind
// with neither fails the test, naming it: a kind added to Kinds cannot go untested.
func kindExamples(t *testing.T) map[string]mesh.Resource {
	t.Helper()
	out := map[string]mesh.Resource{}
	add := func(rs []mesh.Resource) {
		for _, r := range rs {
			if _, ok := out[r.Kind()]; !ok {
				out[r.Kind()] = r
			}
		}
	}
	err := filepath.WalkDir("../testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rs, _ := mesh.DecodeFromControlPlane(path, b) // the invalid examples' valid documents count too
		add(rs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range controlPlaneOnly {
		rs, err := mesh.DecodeFromControlPlane("example", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		add(rs)
	}
	for _, kind := range Kinds {
		if out[kind] == nil {
			t.Errorf("the link carries %s but no example of it was found (testdata/ or controlPlaneOnly): add one, so the saved model is tested with it", kind)
		}
	}
	return out
}

// Every kind the link carries is saved and read back: a model holding one resource of each
// (examples found for whatever Kinds lists, so a kind added later is covered by this test
// without a change to it) is written as the link writes it and reads back with every
// resource's canonical document unchanged. A Router or a DNSZone in the model made every
// save fail (gob: type not registered), the file frozen at the model before.
func TestSavedModelKeepsEveryKind(t *testing.T) {
	examples := kindExamples(t)
	var self *mesh.Dataplane
	var rs []mesh.Resource
	for _, kind := range Kinds {
		r := examples[kind]
		if r == nil {
			continue
		}
		rs = append(rs, r)
		if dp, ok := r.(*mesh.Dataplane); ok {
			self = dp
		}
	}
	if self == nil {
		t.Fatal("no Dataplane example")
	}
	snap, err := mesh.NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cp-model.gob")
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: self.Name, Mesh: mesh.ResourceMesh(&self.Meta), ModelFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.saveModel(snapshotResources(snap)); err != nil {
		t.Fatalf("saving a model of every kind: %v", err)
	}
	back, _, err := c.loadSaved()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		want, got := docsOf(t, snap, kind), docsOf(t, back, kind)
		switch {
		case len(want) == 0 && examples[kind] != nil:
			t.Errorf("%s: the model built with one does not list it (mesh.Snapshot.Resources has no case for it)", kind)
		case !slices.Equal(got, want):
			t.Errorf("%s read back from the saved model:\n%s\nwant:\n%s", kind, strings.Join(got, "---\n"), strings.Join(want, "---\n"))
		}
	}
	if back.Hash != snap.Hash {
		t.Errorf("the model read back hashes %s, saved %s", back.Hash, snap.Hash)
	}
}

// docsOf is the canonical documents of snap's resources of kind.
func docsOf(t *testing.T, snap *mesh.Snapshot, kind string) []string {
	var out []string
	for r := range snap.Resources(kind) {
		b, err := EncodeResource(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// A save that fails is counted (ModelSaveFailures: kuma_dp_model_save_failures_total) and
// logged once for the whole episode, not once per model; the first save that succeeds
// after it says so, and a later failure starts a new episode.
func TestSavedModelFailuresCountedLoggedOnce(t *testing.T) {
	rs, err := mesh.Decode("web.yaml", []byte("type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.0.0.1\n  inbound: [{port: 80, tags: {kuma.io/service: web}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := mesh.NewSnapshot(rs[0].(*mesh.Dataplane), rs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cp-model.gob")
	var logs testutil.LockedBuffer
	c, err := NewClient(ClientConfig{Address: "grpc://127.0.0.1:9", Name: "web-1", Mesh: "default", ModelFile: path},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// The model file's name taken by a directory that is not empty: the rename over it fails.
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	var failing bool
	for range 3 {
		c.saveSnapshot(snap, &failing)
	}
	if n := c.ModelSaveFailures(); n != 3 {
		t.Errorf("%d failures counted, want 3", n)
	}
	if n := strings.Count(logs.String(), "cannot save the model"); n != 1 {
		t.Errorf("%d warnings for one episode, want 1:\n%s", n, logs.String())
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	c.saveSnapshot(snap, &failing)
	c.saveSnapshot(snap, &failing)
	if n := strings.Count(logs.String(), "the model is saved again"); n != 1 || c.ModelSaveFailures() != 3 {
		t.Errorf("after the cause is gone: %d failures, logs:\n%s", c.ModelSaveFailures(), logs.String())
	}
	if _, _, err := c.loadSaved(); err != nil {
		t.Fatalf("the model saved after the episode: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.saveSnapshot(snap, &failing)
	if n := strings.Count(logs.String(), "cannot save the model"); n != 2 || c.ModelSaveFailures() != 4 {
		t.Errorf("a new episode: %d warnings, %d failures", n, c.ModelSaveFailures())
	}
}
