package dirstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Store is the resources directory as a store.Store, for the write API with --store dir:
// what the directory holds (every file the agents' rules read, hand-written ones included)
// is listed and read; a write lands in one file per resource, <dir>/<mesh>/<kind>-<name>.yaml,
// written to a temporary file and renamed over the old one (never half a file). A resource
// written by hand in a file of several documents is updated or deleted in that file, its
// other documents kept byte for byte. A file whose text does not decode (edited by hand,
// half written) keeps its resources at its last good version, as the agents are served
// them, and writes to them get ErrConflict naming the file until it is fixed.
//
// A resource's version is a revision of this process: every change seen (written here, or
// found by a rescan of a file edited by hand) gets the next one. Revisions start at the
// process's start time in microseconds, so a version read from an earlier run never matches
// (409, read again). Compare-and-set is exact within a process: writes are serialized, and
// the directory is rescanned before each.
type Store struct {
	dir string

	mu     sync.Mutex
	rev    int64
	files  map[string]dirFile
	index  map[store.Key]*indexed
	events []store.Event // the last changes, for Watch
	// removals counts the resources that left the file defining them (refreshLocked reads
	// every file again after one).
	removals int
	changed  chan struct{} // closed and replaced at every change
}

type dirFile struct {
	size, mtime int64
	sum         [32]byte
	keys        []store.Key
	// broken is why the file's current text does not decode (edited by hand, half
	// written): its resources stay as they were at its last good version, the version
	// the agents are served, and writes to them are refused until it is fixed.
	broken string
}

type indexed struct {
	item store.Item
	path string
	part int // the document's index among the file's parts
}

// maxEvents bounds the changes kept for Watch; a watch further behind re-lists.
const maxEvents = 4096

// NewStore is the directory dir as a store (it must exist).
func NewStore(dir string) (*Store, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("resources directory %q: not a readable directory", dir)
	}
	s := &Store{dir: filepath.Clean(dir), rev: time.Now().UnixMicro(), files: map[string]dirFile{},
		index: map[store.Key]*indexed{}, changed: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	return s, nil
}

// refreshLocked reads the files changed since the last look and gives each resource whose
// document changed the next revision. When a resource left the file that defined it (the file
// removed, renamed, or edited), every file is read again: another may define it too (the
// first by path counts, as for the agents), and it was skipped there.
func (s *Store) refreshLocked() {
	paths, _ := mesh.ResourceFiles(s.dir)
	sort.Strings(paths)
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p] = true
	}
	removed := s.removals
	for p, f := range s.files { // files gone first: their resources may count elsewhere now
		if !seen[p] {
			for _, k := range f.keys {
				s.removeLocked(k, p)
			}
			delete(s.files, p)
		}
	}
	for again := false; ; again = true {
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			old, had := s.files[p]
			if !again && had && time.Since(fi.ModTime()) > 2*time.Second && old.size == fi.Size() && old.mtime == fi.ModTime().UnixNano() {
				continue
			}
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if !again && had && sha256.Sum256(data) == old.sum {
				continue
			}
			s.indexFileLocked(p, data, fi)
		}
		if again || s.removals == removed {
			return
		}
	}
}

// indexFileLocked (re)reads one file's resources.
func (s *Store) indexFileLocked(path string, data []byte, fi os.FileInfo) {
	old := s.files[path]
	next := dirFile{size: fi.Size(), mtime: fi.ModTime().UnixNano(), sum: sha256.Sum256(data)}
	mtime := fi.ModTime()
	parts := splitParts(path, data)
	decoded := make([][]mesh.Resource, len(parts.docs))
	for i, part := range parts.docs {
		rs, err := mesh.Decode(path, []byte(part))
		if err != nil {
			// Refused whole, as the agents' source refuses it: the last good version stands.
			old.size, old.mtime, old.sum, old.broken = next.size, next.mtime, next.sum, err.Error()
			s.files[path] = old
			return
		}
		decoded[i] = rs
	}
	found := map[store.Key]bool{}
	for i, part := range parts.docs {
		rs := decoded[i]
		if len(rs) != 1 {
			continue // not a resource (a comment) or several (a JSON array): not listed
		}
		r := rs[0]
		k := store.Key{Mesh: mesh.ResourceMesh(r.GetMeta()), Type: r.Kind(), Name: keyName(r)}
		if found[k] {
			continue // defined twice in one file: the first counts, as for the agents
		}
		if cur, ok := s.index[k]; ok && cur.path != path {
			if _, other := s.files[cur.path]; other {
				continue // defined in another file already: that one counts
			}
		}
		found[k] = true
		next.keys = append(next.keys, k)
		cur := s.index[k]
		if cur != nil && bytes.Equal(cur.item.Doc, []byte(part)) {
			cur.path, cur.part = path, i
			continue
		}
		s.rev++
		it := store.Item{Key: k, Doc: []byte(part), Version: s.rev, Created: mtime, Modified: mtime}
		if cur != nil {
			it.Created = cur.item.Created
		}
		s.index[k] = &indexed{item: it, path: path, part: i}
		s.logLocked(store.Event{Type: store.Put, Item: it, Revision: s.rev})
	}
	for _, k := range old.keys {
		if !found[k] {
			s.removeLocked(k, path)
		}
	}
	s.files[path] = next
}

func (s *Store) removeLocked(k store.Key, path string) {
	if cur, ok := s.index[k]; ok && cur.path == path {
		s.removals++
		delete(s.index, k)
		s.rev++
		s.logLocked(store.Event{Type: store.Delete, Item: store.Item{Key: k, Version: s.rev}, Revision: s.rev})
	}
}

func (s *Store) logLocked(e store.Event) {
	s.events = append(s.events, e)
	if len(s.events) > maxEvents {
		s.events = append([]store.Event(nil), s.events[len(s.events)-maxEvents/2:]...)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// keyName is the resource's name in the store (a Route's and a RouteBinding's carry their
// namespace, as the API names them).
func keyName(r mesh.Resource) string {
	switch r := r.(type) {
	case *mesh.Route:
		return mesh.RouteKeyName(r.Namespace, r.Name)
	case *mesh.RouteBinding:
		return mesh.RouteKeyName(r.RouteNamespace, r.RouteName)
	}
	return r.GetMeta().Name
}

// Get implements store.Store.
func (s *Store) Get(_ context.Context, k store.Key) (store.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	if cur, ok := s.index[k]; ok {
		return cur.item, nil
	}
	return store.Item{}, fmt.Errorf("%s: %w", k, store.ErrNotFound)
}

// List implements store.Store (paging by key, as the etcd store).
func (s *Store) List(_ context.Context, meshName, typ, after string, limit int) ([]store.Item, string, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	var out []store.Item
	for k, cur := range s.index {
		if inList(k, meshName, typ) && (after == "" || k.String() > after) {
			out = append(out, cur.item)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	next := ""
	if limit > 0 && len(out) > limit {
		out = out[:limit]
		next = out[limit-1].Key.String()
	}
	return out, next, s.rev, nil
}

// inList says whether k is of the list of meshName's ("": every mesh) type typ ("": every
// type).
func inList(k store.Key, meshName, typ string) bool {
	return (meshName == "" || k.Mesh == meshName) && (typ == "" || k.Type == typ)
}

// Count implements store.Store: the index's resources of the list (rev is not kept: now).
func (s *Store) Count(_ context.Context, meshName, typ string, _ int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	n := 0
	for k := range s.index {
		if inList(k, meshName, typ) {
			n++
		}
	}
	return n, nil
}

// checkLocked applies a write's expected version to what is there, and refuses a write to a
// resource whose file is broken.
func (s *Store) checkLocked(k store.Key, cur *indexed, expect int64) error {
	if err := check(k, cur, expect); err != nil {
		return err
	}
	if cur != nil {
		if why := s.files[cur.path].broken; why != "" {
			return fmt.Errorf("%s: %w: its file %s was edited and does not decode (%s): fix the file first (its last good version is served)", k, store.ErrConflict, cur.path, why)
		}
	}
	return nil
}

// check applies a write's expected version to what is there.
func check(k store.Key, cur *indexed, expect int64) error {
	switch {
	case expect == 0 && cur != nil:
		return fmt.Errorf("%s: %w (version %d, in %s)", k, store.ErrExists, cur.item.Version, cur.path)
	case expect > 0 && cur == nil:
		return fmt.Errorf("%s: %w", k, store.ErrNotFound)
	case expect > 0 && cur.item.Version != expect:
		return fmt.Errorf("%s: %w (version %d, not %d)", k, store.ErrConflict, cur.item.Version, expect)
	}
	return nil
}

// Put implements store.Store: the resource's own file (new resources), or its document in
// the file that holds it, rewritten through a rename.
func (s *Store) Put(_ context.Context, k store.Key, doc []byte, expect int64) (store.Item, error) {
	for what, v := range map[string]string{"mesh": k.Mesh, "type": k.Type, "name": k.Name} {
		if err := store.ValidKeyPart(what, v); err != nil {
			return store.Item{}, err
		}
	}
	if strings.HasPrefix(k.Mesh, ".") {
		return store.Item{}, fmt.Errorf("mesh %q: %w: a mesh name does not start with '.'", k.Mesh, store.ErrInvalid)
	}
	// In a directory a resource's key is read from its document: refuse, before writing, a
	// document that would be read back as another key.
	if rs, err := mesh.Decode(k.String(), doc); err != nil || len(rs) != 1 {
		return store.Item{}, fmt.Errorf("%s: %w: want one valid resource in the document: %v", k, store.ErrInvalid, err)
	} else if got := (store.Key{Mesh: mesh.ResourceMesh(rs[0].GetMeta()), Type: rs[0].Kind(), Name: keyName(rs[0])}); got != k {
		return store.Item{}, fmt.Errorf("%s: %w: the document is %s (a resource without a mesh is of mesh %q in a directory): use that key", k, store.ErrInvalid, got, "default")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	cur := s.index[k]
	if err := s.checkLocked(k, cur, expect); err != nil {
		return store.Item{}, err
	}
	if len(doc) == 0 || doc[len(doc)-1] != '\n' {
		doc = append(append([]byte(nil), doc...), '\n')
	}
	var path string
	var data []byte
	if cur != nil {
		path = cur.path
		old, err := s.reread(k, path)
		if err != nil {
			return store.Item{}, err
		}
		parts := splitParts(path, old)
		if parts.json && len(parts.docs) != 1 {
			return store.Item{}, fmt.Errorf("%s: %w: it is in %s among other resources (a JSON array): edit that file", k, store.ErrInvalid, path)
		}
		parts.docs[cur.part] = string(doc)
		data = parts.join()
	} else {
		path = s.newPath(k)
		data = doc
	}
	if err := writeAtomic(path, data); err != nil {
		return store.Item{}, fmt.Errorf("%s: %w", k, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return store.Item{}, fmt.Errorf("%s: %w", k, err)
	}
	s.indexFileLocked(path, data, fi)
	got, ok := s.index[k]
	if !ok {
		return store.Item{}, fmt.Errorf("%s: written to %s, but the document there is not this resource (its mesh, kind or name differ from the URL's)", k, path)
	}
	now := time.Now()
	got.item.Modified = now
	if cur == nil {
		got.item.Created = now
	}
	return got.item, nil
}

// testHookBeforeRewrite, when set (tests), runs just before a file is read to be rewritten.
var testHookBeforeRewrite func(path string)

// reread reads the file holding k to rewrite it; a file that changed since the store looked
// at it (edited by hand meanwhile) is read into the index and the write refused (ErrConflict):
// its documents may have moved, and the edit may be to k.
func (s *Store) reread(k store.Key, path string) ([]byte, error) {
	if testHookBeforeRewrite != nil {
		testHookBeforeRewrite(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", k, path, err)
	}
	if sha256.Sum256(data) != s.files[path].sum {
		if fi, err := os.Stat(path); err == nil {
			s.indexFileLocked(path, data, fi)
		}
		return nil, fmt.Errorf("%s: %w: %s was edited meanwhile: read it again", k, store.ErrConflict, path)
	}
	return data, nil
}

// maxFileBase bounds a new file's name before its suffix ("-N", ".yaml"), within the 255
// bytes of a file name.
const maxFileBase = 230

// newPath is where a new resource goes: <dir>/<mesh>/<kind>-<name>.yaml (another name when a
// file is there already, holding something else).
func (s *Store) newPath(k store.Key) string {
	file := strings.ToLower(k.Type) + "-" + safeName(k.Name)
	if len(file) > maxFileBase {
		// File names are at most 255 bytes: a long name is cut and told apart by a hash.
		sum := sha256.Sum256([]byte(k.Name))
		file = file[:maxFileBase-17] + "-" + fmt.Sprintf("%x", sum[:8])
	}
	base := filepath.Join(s.dir, k.Mesh, file)
	path := base + ".yaml"
	for n := 2; ; n++ {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return path
		}
		path = fmt.Sprintf("%s-%d.yaml", base, n)
	}
}

// safeName keeps a name's letters, digits, '-', '_' and '.' for a file name (never leading '.').
func safeName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] == '.' {
		b[0] = '_'
	}
	return string(b)
}

// Delete implements store.Store: the resource's file is removed, or its document taken out
// of the file that holds others.
func (s *Store) Delete(_ context.Context, k store.Key, expect int64) error {
	if expect == 0 {
		return fmt.Errorf("%s: delete needs a version or store.Any", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	cur := s.index[k]
	if cur == nil {
		return fmt.Errorf("%s: %w", k, store.ErrNotFound)
	}
	if err := s.checkLocked(k, cur, expect); err != nil {
		return err
	}
	old, err := s.reread(k, cur.path)
	if err != nil {
		return err
	}
	parts := splitParts(cur.path, old)
	if parts.json && len(parts.docs) != 1 {
		return fmt.Errorf("%s: %w: it is in %s among other resources (a JSON array): edit that file", k, store.ErrInvalid, cur.path)
	}
	parts.remove(cur.part)
	if parts.empty() {
		if err := os.Remove(cur.path); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		s.refreshLocked()
		return nil
	}
	data := parts.join()
	if err := writeAtomic(cur.path, data); err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	fi, err := os.Stat(cur.path)
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	s.indexFileLocked(cur.path, data, fi)
	return nil
}

// Watch implements store.Store: the changes seen (by this process's writes, and by a rescan
// of the directory every 200 ms) after revision from; a from older than the changes kept
// gets Relist.
func (s *Store) Watch(ctx context.Context, from int64) <-chan store.Event {
	out := make(chan store.Event, 64)
	go func() {
		defer close(out)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			s.mu.Lock()
			s.refreshLocked()
			var todo []store.Event
			relist := len(s.events) > 0 && from < s.events[0].Revision-1 && s.rev > from
			if !relist {
				i := sort.Search(len(s.events), func(i int) bool { return s.events[i].Revision > from })
				todo = append(todo, s.events[i:]...)
			}
			changed := s.changed
			s.mu.Unlock()
			if relist {
				select {
				case out <- store.Event{Type: store.Relist, Revision: from}:
				case <-ctx.Done():
				}
				return
			}
			for _, e := range todo {
				select {
				case out <- e:
					from = e.Revision
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-t.C:
			}
		}
	}()
	return out
}

// writeAtomic writes data to path through a temporary file in the same directory, synced,
// then renamed over path.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kuma-cp-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// parts is a file split into its YAML documents, with the separator lines between them so
// that it is written back unchanged but for the document replaced or removed.
type parts struct {
	json bool
	head string   // before the first document's text: nothing, or a leading separator
	docs []string // each document's text
	seps []string // seps[i] follows docs[i] (len(docs)-1 of them)
}

func splitParts(path string, data []byte) parts {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return parts{json: true, docs: []string{string(data)}}
	}
	var p parts
	var cur strings.Builder
	lines := strings.SplitAfter(string(data), "\n")
	first := true
	for _, line := range lines {
		if mesh.IsSeparator([]byte(strings.TrimRight(line, "\r\n"))) {
			if first && strings.TrimSpace(cur.String()) == "" {
				p.head = cur.String() + line
				cur.Reset()
				first = false
				continue
			}
			p.docs = append(p.docs, cur.String())
			p.seps = append(p.seps, line)
			cur.Reset()
			first = false
			continue
		}
		cur.WriteString(line)
	}
	p.docs = append(p.docs, cur.String())
	return p
}

func (p *parts) join() []byte {
	var b strings.Builder
	b.WriteString(p.head)
	for i, d := range p.docs {
		b.WriteString(d)
		if i < len(p.seps) {
			if d != "" && !strings.HasSuffix(d, "\n") {
				b.WriteString("\n")
			}
			b.WriteString(p.seps[i])
		}
	}
	return []byte(b.String())
}

func (p *parts) remove(i int) {
	p.docs = append(p.docs[:i:i], p.docs[i+1:]...)
	switch {
	case len(p.seps) == 0:
	case i < len(p.seps):
		p.seps = append(p.seps[:i:i], p.seps[i+1:]...)
	default:
		p.seps = p.seps[:len(p.seps)-1]
	}
}

func (p *parts) empty() bool {
	for _, d := range p.docs {
		if strings.TrimSpace(d) != "" {
			return false
		}
	}
	return true
}
