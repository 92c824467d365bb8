package dirsource

import (
	"context"
	"encoding/gob"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// dirLoader loads the model as mesh.Load does (the dataplane file must hold exactly one
// Dataplane; every *.yaml, *.yml and *.json under the directory, in lexical order), with two
// differences that matter to a long-running agent:
//
//   - each file's decoded resources are kept, keyed by its size, modification time and
//     inode, so a reload decodes only the files that changed (a policy edit in a mesh of
//     10,000 dataplanes decodes one small file, not the inventory), and files are decoded
//     in parallel;
//   - entries whose name starts with ".." are skipped: a Kubernetes ConfigMap volume keeps
//     its real files in "..<timestamp>/" and "..data/" and shows them through symlinks, so
//     reading those directories too would load every resource twice.
//
// Decoding and validation are mesh's (mesh.LoadFile, mesh.NewSnapshot).
type dirLoader struct {
	mu    sync.Mutex
	cache fileCache
	// dpFile is the dataplane file, rendered with vars before it is decoded; it is never
	// persisted (its variables may differ at the next start, e.g. a new pod IP).
	dpFile string
	vars   map[string]string
	// decodes counts files decoded (not served from the cache), for tests.
	decodes int
	// readFile is readRegular, and writeEntry cplink.WriteCacheStream; tests make them fail.
	// intern is mesh.NewSource (ownSources); tests count its calls.
	intern     func(file string, doc int) mesh.Source
	readFile   func(string) ([]byte, error)
	writeEntry func(path, pattern string, encode func(*gob.Encoder) error) error
	// maxFile and maxTotal are the size limits of one file and of all (0: none).
	maxFile, maxTotal int64
	// ctx cancels a load in progress (setContext); nil is never cancelled.
	ctx context.Context
	// reach is the dataplane's reachable services (nil: every service), and reachKey its
	// Key: the cached files keep only the dataplanes reach keeps.
	reach    *mesh.Reach
	reachKey string
	// last is the last snapshot built, and lastFrom what it was built from: a load whose
	// files all give back the resources they gave then returns it again (see Load).
	last     *mesh.Snapshot
	lastFrom []loadPart
	// lastFromFor is the reachable services' key lastFrom's files were kept for.
	lastFromFor string
	// good is, for each file of the directory now refused, its last version accepted (its
	// decode cache entry as it was then): served when the last snapshot does not hold the
	// file (the first load after a restart, when the decode cache restored it), and kept in
	// the decode cache while the file stays refused.
	good map[string]cachedFile
	// keptFor is, for each file refused in the last load, the reachable services its last
	// good version can still hold (a key as reachKey's; "": every service): those of the
	// list it was kept for, less those of every list since (each load filters it again).
	keptFor map[string]string
	// forgot is the content hash of each file a forced reload (forget) made the next load
	// decode again: a file refused in that load keeps it with its last good version, so
	// that version is still written to the decode cache.
	forgot map[string]digest
	// builder hashes again only what changed since the last snapshot.
	builder mesh.SnapshotBuilder
	// changes counts the changes to cache that change what the decode cache holds (a file
	// decoded to other content, gone, forgotten), and written is changes as the last
	// complete write of the decode cache found it: a reload that changed nothing there (a
	// touch of every file) does not list the cache's entries again to learn it.
	changes, written uint64
}

// loadPart is one file of a load as its snapshot was built from it: its path and the
// resources it gave (a file decoded again gives new ones: the list keeps them, or the
// snapshot's list it is a stretch of, from being freed, so the address of the first is
// never reused), the list the file cache keeps for it when it is the same. A file refused gives again the resources of its last good
// version (see Load).
type loadPart struct {
	path string
	list resList
}

func newLoadPart(path string, f cachedFile) loadPart {
	return loadPart{path: path, list: keep(f.list, f.res)}
}

// sameParts reports whether two loads' files gave the same resources.
func sameParts(a, b []loadPart) bool {
	return slices.EqualFunc(a, b, func(x, y loadPart) bool {
		return x.path == y.path && x.list.n == y.list.n && (x.list.n == 0 || x.list == y.list)
	})
}

// loadParts describes a load's files (paths[i] gave files[i]).
func loadParts(paths []string, files ...[]cachedFile) []loadPart {
	parts := make([]loadPart, 0, len(paths))
	for _, fs := range files {
		for _, f := range fs {
			parts = append(parts, newLoadPart(paths[len(parts)], f))
		}
	}
	return parts
}

// RefusedFiles is returned beside a snapshot when files of the directory were refused (a
// decode or validation error, a file unreadable or over the size limit): each file is
// served at its last good version - the resources it gave the last snapshot - or left out
// when it never gave one, and the other files' changes are served. One bad file then
// holds back nothing but itself: a broken policy does not stop every agent reading the
// directory from taking the next dataplane, nor a new agent from starting.
type RefusedFiles struct {
	Files []cplink.RefusedFile
}

func (r *RefusedFiles) Error() string {
	var b strings.Builder
	for i, f := range r.Files {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Err.Error())
	}
	return b.String()
}

// Unwrap gives each file's error (errors.As finds a mesh.Errors among them).
func (r *RefusedFiles) Unwrap() []error {
	out := make([]error, len(r.Files))
	for i, f := range r.Files {
		out[i] = f.Err
	}
	return out
}

// setContext makes the next loads stop early once ctx is cancelled.
func (l *dirLoader) setContext(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ctx = ctx
}

// cancelled is the load's cancellation error, or nil.
func (l *dirLoader) cancelled() error {
	if l.ctx == nil {
		return nil
	}
	if err := l.ctx.Err(); err != nil {
		return fmt.Errorf("loading stopped: %w", err)
	}
	return nil
}

type fileStamp struct {
	size, mtime int64
	ino         uint64
}

type cachedFile struct {
	stamp fileStamp
	// sum is the digest of the bytes decoded: a file rewritten with the same content (a
	// touch, a ConfigMap resync) keeps its decoded resources instead of a second copy of them.
	sum digest
	res []mesh.Resource
	// list is what the file cache keeps of res when res was read from it (see resList).
	list resList
	err  error
	// readFailed: the file could not be read (permission denied, an I/O error). That says
	// nothing of its content and may end without the stamp changing (chmod), so it is never
	// cached: the next load reads the file again.
	readFailed bool // (or its decoding was cancelled)
}

func newDirLoader() *dirLoader {
	return &dirLoader{good: map[string]cachedFile{}, intern: mesh.NewSource, readFile: readRegular,
		writeEntry: cplink.WriteCacheStream, changes: 1}
}

// forget makes the next load read and decode every file again (SIGHUP). The resources
// decoded before stay, only for that decode to give back the objects of those that did
// not change (see reuseUnchanged): a forced reload of an unchanged inventory leaves the
// model holding the objects it held, not a second copy.
func (l *dirLoader) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgot = make(map[string]digest, l.cache.len())
	for i := range l.cache.files { // (not all(): the files' lists are not read back)
		l.forgot[*l.cache.files[i].name] = l.cache.files[i].sum
	}
	l.forgetLocked()
}

func (l *dirLoader) forgetLocked() {
	l.changes++
	for i := range l.cache.files {
		c := &l.cache.files[i]
		c.stamp, c.sum = fileStamp{}, digest{} // matches no file: read and decoded again
	}
}

// Load reads the dataplane file and the directory.
func (l *dirLoader) Load(dataplaneFile, policiesDir string) (*mesh.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.cache.dropIndex()
	l.dpFile = dataplaneFile
	wasFor := l.reachKey // what the files held were kept for
	listed, odd, errs := listFiles(dataplaneFile, policiesDir)
	all := l.keptPaths(listed)
	paths := all[1:]
	if err := l.checkTotal(all); err != nil {
		return nil, err
	}
	// The dataplane file first: its reachable services decide which dataplanes the
	// directory's files keep (files kept for another list are decoded again). A dataplane
	// file that does not decode leaves the list as it was; the load reports why.
	first := l.decodeAll(all[:1])
	self, selfErrs := mesh.SelfDataplane(dataplaneFile, first[0].res, first[0].err)
	if self != nil {
		l.setReach(mesh.ReachOf(self))
	}
	results := l.decodeAll(paths[:len(paths)-len(odd)])
	defer func() { l.forgot = nil }()
	for j, e := range odd {
		l.keepGood(paths[len(paths)-len(odd)+j])
		results = append(results, cachedFile{err: mesh.Errors{e}})
	}
	l.forgetAllBut(all)
	if err := l.cancelled(); err != nil {
		return nil, err
	}

	// The dataplane file and the directory's listing are the model's frame: without them
	// there is nothing to serve, and the whole load is refused. A file of the directory
	// refused is served at its last good version (RefusedFiles).
	errs = append(selfErrs, errs...)
	if len(errs) > 0 {
		return nil, errs
	}
	refused := l.lastGood(self, paths, results, wasFor)
	snap, err := l.snapshot(self, all, first, results)
	if err != nil {
		return nil, err
	}
	return snap, refused
}

// listFiles lists the dataplane file and the resource files under policiesDir (none when
// it is ""), then the files there that are not regular (odd: each refused, never read);
// errs are the problems of the listing.
func listFiles(dataplaneFile, policiesDir string) (listed []string, odd []*mesh.FieldError, errs mesh.Errors) {
	listed = []string{dataplaneFile}
	if policiesDir == "" {
		return listed, nil, nil
	}
	paths, walkErrs := mesh.ResourceFiles(policiesDir)
	for _, e := range walkErrs {
		if isOddFile(e.Source) {
			odd = append(odd, e)
			continue
		}
		errs = append(errs, e)
	}
	listed = append(listed, paths...)
	for _, e := range odd {
		listed = append(listed, e.Source)
	}
	return listed, odd, errs
}

// setReach makes reach the dataplane's reachable services; when the list changed, what was
// decoded and kept for the old one is forgotten (decoded again, not written under the new).
func (l *dirLoader) setReach(reach *mesh.Reach) {
	l.reach = reach
	if k := reach.Key(); k != l.reachKey {
		l.forgetLocked()
		l.forgot = nil // what was decoded before is for the old list
		l.reachKey = k
		for p, g := range l.good {
			g.sum = digest{} // kept for the old list: not written under the new one
			l.good[p] = g
		}
	}
}

// snapshot is the model of self and the files' results (first: the dataplane file's).
// Every file giving back the resources it gave for the last snapshot (nothing changed, or
// only stamps: a touch, a ConfigMap resync, a poll) gives back that snapshot: built again,
// it would be the same model at the cost of a model's worth of garbage.
func (l *dirLoader) snapshot(self *mesh.Dataplane, all []string, first, results []cachedFile) (*mesh.Snapshot, error) {
	from := loadParts(all, first, results)
	if l.last != nil && sameParts(from, l.lastFrom) {
		return l.last, nil
	}
	n := 0
	runs := make([][]mesh.Resource, len(results))
	for i, r := range results {
		runs[i] = r.res
		n += len(r.res)
	}
	snap, err := l.builder.Build(self, mergeByName(runs, n))
	if err != nil {
		return nil, err
	}
	l.share(snap, l.last, from)
	l.last, l.lastFrom, l.lastFromFor = snap, from, l.reachKey
	return snap, nil
}

// keptPaths returns all with each path the last snapshot was built from, or the file cache
// holds, replaced by the string kept for it: the load's parts, the cache's entry (its name)
// and the file's resources' sources then share one copy of each path (a directory of a file
// per dataplane: 10,000 paths), and a reload does not leave the paths of all the files
// freshly allocated among its garbage, one live string in each span of it (a touch of
// 20,000 files kept 17 MiB more of the heap in use).
func (l *dirLoader) keptPaths(all []string) []string {
	kept := l.lastFrom
	if len(kept) == len(all) && slices.EqualFunc(kept, all, func(k loadPart, p string) bool { return k.path == p }) {
		for i := range all {
			all[i] = kept[i].path
		}
		return all
	}
	idx := l.cache.index() // files added or gone (or restored): found by name
	for i, p := range all {
		if j, ok := idx[p]; ok {
			all[i] = *l.cache.files[j].name
		}
	}
	return all
}

// checkTotal refuses a model whose files are larger than maxTotal in all, before any is read
// (those over maxFile, refused each and never read, left out of the sum).
func (l *dirLoader) checkTotal(paths []string) error {
	if l.maxTotal <= 0 {
		return nil
	}
	var total int64
	for _, p := range paths {
		// A file over the limit for one is refused as a file, never read: not counted.
		if st, err := stampOf(p); err == nil && (l.maxFile <= 0 || st.size <= l.maxFile) {
			total += st.size
		}
	}
	if total > l.maxTotal {
		return mesh.Errors{{Source: filepath.Dir(paths[len(paths)-1]), Msg: fmt.Sprintf(
			"the model's %d files are %s in all, over the limit of %s (--max-total-size-mib): the last good model stays",
			len(paths), mib(total), mib(l.maxTotal))}}
	}
	return nil
}

func mib(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
