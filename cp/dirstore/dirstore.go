// Package dirstore is the control plane's directory backend: the resources directory read as
// the agent reads its policies directory, refreshed by polling, served through a
// fanout.ControlPlane (Dir); and the same directory as a store.Store for the write API
// (Store): one file per resource written, through a rename, with versions and
// compare-and-set.
package dirstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Dir reads the resources directory as the agent reads its policies directory
// (mesh.ResourceFiles: every *.yaml, *.yml and *.json below it, ConfigMap ".." entries
// skipped), decoded and validated with mesh's
// code, each resource encoded once in the link's envelope (cplink.EncodeResource).
//
// A file that fails validation is refused whole: its errors are logged and the resources it
// held at its last good version keep being served (the agents' directory source keeps a
// refused file's last good version the same way). With validate off (--skip-validation)
// the documents that fail are served as written, for the agents to judge (and NACK).
type Dir struct {
	dir      string
	validate bool
	log      *slog.Logger
	files    map[string]storedFile
}

type storedFile struct {
	size, mtime int64
	sum         [32]byte
	docs        []fanout.Doc // the last good (or, without validation, the last) documents
}

func New(dir string, validate bool, log *slog.Logger) *Dir {
	return &Dir{dir: filepath.Clean(dir), validate: validate, log: log, files: map[string]storedFile{}}
}

// scan reads what changed since the last scan and returns everything served; changed is
// false (and sv empty) when no file changed.
func (s *Dir) Scan() (sv fanout.Served, changed bool) {
	paths, walkErrs := mesh.ResourceFiles(s.dir) // the agent's rules for a directory
	for _, e := range walkErrs {
		s.log.Warn("cannot read", "error", e.Error())
	}
	sort.Strings(paths)
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p] = true
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		old, had := s.files[p]
		// A rewrite of the same size within the file system's time granularity keeps the
		// stamp: recent files are read again and compared by content.
		recent := time.Since(fi.ModTime()) < 2*time.Second
		if had && !recent && old.size == fi.Size() && old.mtime == fi.ModTime().UnixNano() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			s.log.Warn("cannot read", "path", p, "error", err)
			continue
		}
		sum := sha256.Sum256(data)
		if had && sum == old.sum {
			continue
		}
		changed = true
		next := storedFile{size: fi.Size(), mtime: fi.ModTime().UnixNano(), sum: sum, docs: old.docs}
		if docs, ok := s.readFile(p, data); ok {
			next.docs = docs
		}
		s.files[p] = next
	}
	for p := range s.files {
		if !seen[p] {
			delete(s.files, p)
			changed = true
		}
	}
	if !changed {
		return fanout.Served{}, false
	}
	return s.collect(paths), true
}

// readFile decodes one file; ok is false when it is refused (its last good stays).
func (s *Dir) readFile(path string, data []byte) (docs []fanout.Doc, ok bool) {
	rs, derr := mesh.Decode(path, data)
	good := map[string]bool{}
	for _, r := range rs {
		body, err := cplink.EncodeResource(r)
		if err != nil {
			s.log.Error("cannot encode", "path", path, "error", err)
			return nil, false
		}
		m := r.GetMeta()
		source := m.Source.String()
		docs = append(docs, fanout.Doc{Kind: r.Kind(), Mesh: mesh.ResourceMesh(m), Name: mesh.StoreName(r), Meshless: mesh.Meshless(r), Body: body, Source: source})
		good[source] = true
	}
	if derr == nil {
		return docs, true
	}
	if s.validate {
		s.log.Error("refused a file that does not validate; serving its last good version", "path", path, "error", derr.Error())
		return nil, false
	}
	raw := rawDocs(path, data, good)
	s.log.Warn("serving documents that do not validate, as written (--skip-validation): agents will judge them",
		"path", path, "documents", len(raw), "error", derr.Error())
	return append(docs, raw...), true
}

// rawDocs returns the YAML documents of data whose source is not in good, as JSON, with the
// kind, name and mesh read from their top-level fields (universal or Kubernetes form).
// Documents too broken for that are skipped.
func rawDocs(path string, data []byte, good map[string]bool) []fanout.Doc {
	var out []fanout.Doc
	n := 0
	for _, part := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(part)) == 0 {
			continue
		}
		n++
		source := path + "#" + strconv.Itoa(n)
		if good[source] {
			continue
		}
		body, err := yaml.YAMLToJSON(part)
		if err != nil {
			continue
		}
		var top struct {
			Type, Kind, Name, Mesh string
			Metadata               struct {
				Name   string
				Labels map[string]string
			}
		}
		if json.Unmarshal(body, &top) != nil {
			continue
		}
		d := fanout.Doc{Kind: top.Type, Name: top.Name, Mesh: top.Mesh, Body: body, Source: source}
		if d.Kind == "" {
			d.Kind, d.Name, d.Mesh = top.Kind, top.Metadata.Name, top.Metadata.Labels[mesh.MeshLabel]
		}
		if !slices.Contains(cplink.Kinds, d.Kind) || slices.Contains(mesh.DerivedKinds, d.Kind) || d.Name == "" {
			continue // not for agents, or only ever the control plane's own (never a file's)
		}
		if d.Mesh == "" {
			d.Mesh = "default"
		}
		out = append(out, d)
	}
	return out
}

// collect lays out every file's documents by mesh, kind and name. A name defined twice in
// one mesh and kind is an error naming both files; the first (in path order) is served.
func (s *Dir) collect(paths []string) fanout.Served {
	out := fanout.NewServed()
	where := map[string]string{}
	for _, p := range paths {
		for _, d := range s.files[p].docs {
			key := d.Mesh + "/" + d.Kind + "/" + d.Name
			if d.Meshless {
				key = "*/" + d.Kind + "/" + d.Name
			}
			if prev, dup := where[key]; dup {
				s.log.Error("duplicate resource; serving the first", "resource", key, "source", d.Source, "first", prev)
				continue
			}
			where[key] = d.Source
			out.Put(d)
		}
	}
	return out
}

// Watch scans the directory every interval and serves what changed through cp, until ctx ends.
func (s *Dir) Watch(ctx context.Context, cp *fanout.ControlPlane, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sv, updated, removed, changed := s.Refresh(cp)
		if !changed {
			continue
		}
		s.log.Info("resources changed", "resources", sv.Count(), "meshes", sv.Meshes(), "agents", cp.Connected(),
			"updated", updated, "removed", removed)
	}
}

// Refresh is one step of Watch: what changed in the directory since the last scan is
// served; changed is false (and nothing applied) when no file changed.
func (s *Dir) Refresh(cp *fanout.ControlPlane) (sv fanout.Served, updated, removed int, changed bool) {
	if sv, changed = s.Scan(); changed {
		updated, removed = cp.Apply(sv)
	}
	return sv, updated, removed, changed
}
