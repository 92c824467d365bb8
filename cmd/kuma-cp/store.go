package main

import (
	"bytes"
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

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// store reads the resources directory as the agent reads its policies directory
// (mesh.ResourceFiles: every *.yaml, *.yml and *.json below it, ConfigMap ".." entries
// skipped), decoded and validated with mesh's
// code, each resource encoded once in the link's envelope (cplink.EncodeResource).
//
// A file that fails validation is refused whole: its errors are logged and the resources it
// held at its last good version keep being served (agents keep the last good model the
// same way). With validate off (--skip-validation) the documents that fail are served as
// written, for the agents to judge (and NACK).
type store struct {
	dir      string
	validate bool
	log      *slog.Logger
	files    map[string]storedFile
}

type storedFile struct {
	size, mtime int64
	sum         [32]byte
	docs        []doc // the last good (or, without validation, the last) documents
}

// doc is one resource as served.
type doc struct {
	kind, mesh, name string
	meshless         bool // a HostnameGenerator for every mesh
	body             []byte
	source           string
}

// served is what the store serves: per mesh, per kind, per name, the envelope's JSON; the
// meshless resources (HostnameGenerators without a mesh) sit under global.
type served struct {
	meshes map[string]map[string]map[string][]byte
	global map[string]map[string][]byte
}

func newStore(dir string, validate bool, log *slog.Logger) *store {
	return &store{dir: filepath.Clean(dir), validate: validate, log: log, files: map[string]storedFile{}}
}

// scan reads what changed since the last scan and returns everything served; changed is
// false (and sv empty) when no file changed.
func (s *store) scan() (sv served, changed bool) {
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
		return served{}, false
	}
	return s.collect(paths), true
}

// readFile decodes one file; ok is false when it is refused (its last good stays).
func (s *store) readFile(path string, data []byte) (docs []doc, ok bool) {
	rs, derr := mesh.Decode(path, data)
	good := map[string]bool{}
	for _, r := range rs {
		body, err := cplink.EncodeResource(r)
		if err != nil {
			s.log.Error("cannot encode", "path", path, "error", err)
			return nil, false
		}
		m := r.GetMeta()
		docs = append(docs, doc{kind: r.Kind(), mesh: mesh.ResourceMesh(m), name: m.Name, meshless: mesh.Meshless(r), body: body, source: m.Source})
		good[m.Source] = true
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
func rawDocs(path string, data []byte, good map[string]bool) []doc {
	var out []doc
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
		d := doc{kind: top.Type, name: top.Name, mesh: top.Mesh, body: body, source: source}
		if d.kind == "" {
			d.kind, d.name, d.mesh = top.Kind, top.Metadata.Name, top.Metadata.Labels[mesh.MeshLabel]
		}
		if !slices.Contains(cplink.Kinds, d.kind) || d.name == "" {
			continue
		}
		if d.mesh == "" {
			d.mesh = "default"
		}
		out = append(out, d)
	}
	return out
}

// collect lays out every file's documents by mesh, kind and name. A name defined twice in
// one mesh and kind is an error naming both files; the first (in path order) is served.
func (s *store) collect(paths []string) served {
	out := newServed()
	where := map[string]string{}
	for _, p := range paths {
		for _, d := range s.files[p].docs {
			key := d.mesh + "/" + d.kind + "/" + d.name
			if d.meshless {
				key = "*/" + d.kind + "/" + d.name
			}
			if prev, dup := where[key]; dup {
				s.log.Error("duplicate resource; serving the first", "resource", key, "source", d.source, "first", prev)
				continue
			}
			where[key] = d.source
			out.put(d)
		}
	}
	return out
}

func newServed() served {
	return served{meshes: map[string]map[string]map[string][]byte{}, global: map[string]map[string][]byte{}}
}

// put serves d: under its mesh, or under global for a meshless resource.
func (sv served) put(d doc) {
	byKind := sv.global
	if !d.meshless {
		byKind = sv.meshes[d.mesh]
		if byKind == nil {
			byKind = map[string]map[string][]byte{}
			sv.meshes[d.mesh] = byKind
		}
	}
	if byKind[d.kind] == nil {
		byKind[d.kind] = map[string][]byte{}
	}
	byKind[d.kind][d.name] = d.body
}

// forMesh is what one mesh's agents get of one kind: the mesh's own resources and the
// meshless ones (a mesh's own wins a name clash).
func (sv served) forMesh(meshName, kind string) map[string][]byte {
	own := sv.meshes[meshName][kind]
	global := sv.global[kind]
	if len(global) == 0 {
		return own
	}
	out := make(map[string][]byte, len(own)+len(global))
	for n, b := range global {
		out[n] = b
	}
	for n, b := range own {
		out[n] = b
	}
	return out
}

func (sv served) count() int {
	n := 0
	for _, byKind := range sv.meshes {
		for _, byName := range byKind {
			n += len(byName)
		}
	}
	for _, byName := range sv.global {
		n += len(byName)
	}
	return n
}
