package dirsource

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unique"
	"unsafe"

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
	forgot map[string][32]byte
	// builder hashes again only what changed since the last snapshot.
	builder mesh.SnapshotBuilder
	// changes counts the changes to cache that change what the decode cache holds (a file
	// decoded to other content, gone, forgotten), and written is changes as the last
	// complete write of the decode cache found it: a reload that changed nothing there (a
	// touch of every file) does not list the cache's entries again to learn it.
	changes, written uint64
}

// loadPart is one file of a load as its snapshot was built from it: its path and the
// resources it gave (a file decoded again gives new ones: the slice keeps them from being
// freed, so the address of the first is never reused). A file refused gives again the
// resources of its last good version (see Load).
//
// The resources are held as their slice's first element and length (a directory of a file
// per dataplane holds 10,000 parts or more: a slice's capacity, which nothing reads, would
// be 8 bytes more each); a nil slice stays nil (no first element).
type loadPart struct {
	path  string
	first *mesh.Resource
	n     int
}

func newLoadPart(path string, res []mesh.Resource) loadPart {
	return loadPart{path: path, first: unsafe.SliceData(res), n: len(res)}
}

// res is the part's resources (nil when they were nil), of capacity their length.
func (p loadPart) res() []mesh.Resource { return unsafe.Slice(p.first, p.n) }

// sameParts reports whether two loads' files gave the same resources.
func sameParts(a, b []loadPart) bool {
	return slices.EqualFunc(a, b, func(x, y loadPart) bool {
		return x.path == y.path && x.n == y.n && (x.n == 0 || x.first == y.first)
	})
}

// loadParts describes a load's files (paths[i] gave files[i]).
func loadParts(paths []string, files ...[]cachedFile) []loadPart {
	parts := make([]loadPart, 0, len(paths))
	for _, fs := range files {
		for _, f := range fs {
			parts = append(parts, newLoadPart(paths[len(parts)], f.res))
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
	// sum is the SHA-256 of the bytes decoded: a file rewritten with the same content (a
	// touch, a ConfigMap resync) keeps its decoded resources instead of a second copy of them.
	sum [32]byte
	res []mesh.Resource
	err error
	// readFailed: the file could not be read (permission denied, an I/O error). That says
	// nothing of its content and may end without the stamp changing (chmod), so it is never
	// cached: the next load reads the file again.
	readFailed bool // (or its decoding was cancelled)
}

func newDirLoader() *dirLoader {
	return &dirLoader{good: map[string]cachedFile{}, readFile: readRegular, writeEntry: cplink.WriteCacheStream, changes: 1}
}

// forget makes the next load read and decode every file again (SIGHUP). The resources
// decoded before stay, only for that decode to give back the objects of those that did
// not change (see reuseUnchanged): a forced reload of an unchanged inventory leaves the
// model holding the objects it held, not a second copy.
func (l *dirLoader) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgot = make(map[string][32]byte, l.cache.len())
	for p, c := range l.cache.all() {
		l.forgot[p] = c.sum
	}
	l.forgetLocked()
}

func (l *dirLoader) forgetLocked() {
	l.changes++
	for i := range l.cache.files {
		c := &l.cache.files[i]
		c.stamp, c.sum = fileStamp{}, [32]byte{} // matches no file: read and decoded again
	}
}

// Load reads the dataplane file and the directory.
func (l *dirLoader) Load(dataplaneFile, policiesDir string) (*mesh.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.cache.dropIndex()
	l.dpFile = dataplaneFile
	wasFor := l.reachKey // what the files held were kept for
	var errs mesh.Errors
	var paths []string
	var odd []*mesh.FieldError // files that are not regular: each refused, never read
	if policiesDir != "" {
		var walkErrs mesh.Errors
		paths, walkErrs = mesh.ResourceFiles(policiesDir)
		for _, e := range walkErrs {
			if isOddFile(e.Source) {
				odd = append(odd, e)
				continue
			}
			errs = append(errs, e)
		}
	}
	listed := append([]string{dataplaneFile}, paths...)
	for _, e := range odd {
		listed = append(listed, e.Source)
	}
	all, held := l.keptPaths(listed)
	defer runtime.KeepAlive(held)
	paths = all[1:]
	if err := l.checkTotal(all); err != nil {
		return nil, err
	}
	// The dataplane file first: its reachable services decide which dataplanes the
	// directory's files keep (files kept for another list are decoded again). A dataplane
	// file that does not decode leaves the list as it was; the load reports why.
	first := l.decodeAll(all[:1])
	self, selfErrs := mesh.SelfDataplane(dataplaneFile, first[0].res, first[0].err)
	if self != nil {
		l.reach = mesh.ReachOf(self)
		if k := l.reach.Key(); k != l.reachKey {
			l.forgetLocked()
			l.forgot = nil // what was decoded before is for the old list
			l.reachKey = k
			for p, g := range l.good {
				g.sum = [32]byte{} // kept for the old list: not written under the new one
				l.good[p] = g
			}
		}
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
	n := 0
	for _, r := range results {
		n += len(r.res)
	}
	// Every file giving back the resources it gave for the last snapshot (nothing changed,
	// or only stamps: a touch, a ConfigMap resync, a poll) gives back that snapshot: built
	// again, it would be the same model at the cost of a model's worth of garbage.
	from := loadParts(all, first, results)
	if l.last != nil && sameParts(from, l.lastFrom) {
		return l.last, refused
	}
	runs := make([][]mesh.Resource, len(results))
	for i, r := range results {
		runs[i] = r.res
	}
	snap, err := l.builder.Build(self, mergeByName(runs, n))
	if err != nil {
		return nil, err
	}
	l.last, l.lastFrom, l.lastFromFor = snap, from, l.reachKey
	return snap, refused
}

// lastGood replaces the result of each file refused in this load (results[i], of
// paths[i]) by the resources that file gave the last snapshot - none when it gave none or
// is new - and reports them all; nil when every file was accepted. A resource of a last
// good version that an accepted file now defines (the same in self's snapshot) gives way
// to it: moved out of the refused file, it is served from where it is now, instead of
// the two copies refusing the whole load. It does not come back to the last good
// version (the version kept from then on is the one served).
func (l *dirLoader) lastGood(self *mesh.Dataplane, paths []string, results []cachedFile, wasFor string) error {
	var byPath map[string][]mesh.Resource
	var refused []cplink.RefusedFile
	var keptAt []int
	keptFor := l.keptFor
	l.keptFor = nil
	now := l.reachKey // reach.Key(), set with reach above (a load without self returns before)
	for i := range results {
		if results[i].err == nil {
			continue
		}
		if byPath == nil {
			byPath = make(map[string][]mesh.Resource, len(l.lastFrom))
			for _, p := range l.lastFrom {
				byPath[p.path] = p.res()
			}
		}
		good, kept := byPath[paths[i]]
		from := l.lastFromFor
		if !kept {
			from = wasFor
			good, kept = l.good[paths[i]].res, true // not in the last snapshot (a restart)
		}
		kept = kept && good != nil
		if kept && l.reach != nil {
			good = l.reach.Filter(good) // kept for another list of reachable services
		}
		holds, tracked := keptFor[paths[i]]
		if !tracked {
			holds = from // refused since this load
		}
		if l.keptFor == nil {
			l.keptFor = map[string]string{}
		}
		l.keptFor[paths[i]] = reachMeet(holds, now)
		refused = append(refused, cplink.RefusedFile{Path: paths[i], Kept: kept, Narrowed: kept && !reachCovers(holds, now),
			Err: results[i].err})
		results[i] = cachedFile{res: good, err: results[i].err}
		if len(good) > 0 {
			keptAt = append(keptAt, i)
		}
	}
	if refused == nil {
		return nil
	}
	giveWay(self, results, keptAt)
	for i := range results {
		if results[i].err != nil {
			results[i].err = nil
		}
	}
	return &RefusedFiles{Files: refused}
}

// reachCovers reports whether a version kept for the reachable services of key have
// holds every dataplane the list of key want keeps (keys as mesh.Reach.Key: "" is every
// service).
func reachCovers(have, want string) bool {
	if have == "" {
		return true
	}
	if want == "" {
		return false
	}
	h := strings.Split(have, "\n")
	for _, s := range strings.Split(want, "\n") {
		if _, ok := slices.BinarySearch(h, s); !ok {
			return false
		}
	}
	return true
}

// reachMeet is the key of the services both keys keep.
func reachMeet(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	bs := strings.Split(b, "\n")
	var out []string
	for _, s := range strings.Split(a, "\n") {
		if _, ok := slices.BinarySearch(bs, s); ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "\x00" // none: covers no list
	}
	return strings.Join(out, "\n")
}

// nameKey is what two resources must not share in a snapshot: their kind and name.
type nameKey struct{ kind, name string }

// giveWay drops from the last good versions at keptAt (results[i] for i in keptAt) each
// resource that a file accepted in this load (a result without err) defines too: of the
// same kind and name, both in self's mesh (or of every mesh) - the two a snapshot holds
// and finds duplicated. The dataplane file's own dataplane wins over a copy in any file.
func giveWay(self *mesh.Dataplane, results []cachedFile, keptAt []int) {
	if len(keptAt) == 0 || self == nil {
		return
	}
	meshName := cmp.Or(self.Mesh, "default")
	in := func(r mesh.Resource) bool { return mesh.Meshless(r) || mesh.ResourceMesh(r.GetMeta()) == meshName }
	keys := map[nameKey]bool{}
	for _, i := range keptAt {
		for _, r := range results[i].res {
			if in(r) {
				keys[nameKey{r.Kind(), r.GetMeta().Name}] = false
			}
		}
	}
	taken := 0
	for _, r := range results {
		if r.err != nil {
			continue
		}
		for _, res := range r.res {
			k := nameKey{res.Kind(), res.GetMeta().Name}
			if seen, ok := keys[k]; ok && !seen && in(res) {
				keys[k] = true
				taken++
			}
		}
	}
	if taken == 0 {
		return
	}
	drop := func(r mesh.Resource) bool { return keys[nameKey{r.Kind(), r.GetMeta().Name}] && in(r) }
	for _, i := range keptAt {
		if res := results[i].res; slices.ContainsFunc(res, drop) {
			// a new slice: the last good version, held by the last snapshot, is not modified
			results[i].res = slices.DeleteFunc(slices.Clone(res), drop)
		}
	}
}

// keptPaths returns all with each path the last snapshot was built from replaced by the
// string kept for it then. The cache is keyed by path, and a Go map given a key it holds
// keeps the new string: every reload would otherwise leave the paths of all the files
// freshly allocated among its garbage, one live string in each span of it (a touch of
// 20,000 files kept 17 MiB more of the heap in use).
//
// A path new to the loader is interned as mesh.Source interns it, and held is the handles
// of those: kept alive until the load has decoded the files (a handle no longer held may
// be dropped, and the decode would intern a copy of its own).
func (l *dirLoader) keptPaths(all []string) (paths []string, held []unique.Handle[string]) {
	kept := l.lastFrom
	if len(kept) == len(all) && slices.EqualFunc(kept, all, func(k loadPart, p string) bool { return k.path == p }) {
		for i := range all {
			all[i] = kept[i].path
		}
		return all, nil
	}
	byPath := make(map[string]string, len(kept)) // files added or gone: found by name
	for _, k := range kept {
		byPath[k.path] = k.path
	}
	for i, p := range all {
		if k, ok := byPath[p]; ok {
			all[i] = k
			continue
		}
		// A file new to this loader: its resources' sources intern its path (mesh.Source),
		// which copies it; the cache and the load's parts keep that copy too, instead of
		// a second one of every path (a directory of a file per dataplane: 10,000 paths).
		h := unique.Make(p)
		held = append(held, h)
		all[i] = h.Value()
	}
	return all, held
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

// decodeAll returns each file's resources, decoding in parallel only those whose stamp
// changed since the last load. A file decoded now keeps only the dataplanes l.reach keeps.
func (l *dirLoader) decodeAll(paths []string) []cachedFile {
	out := make([]cachedFile, len(paths))
	var todo []int
	for i, p := range paths {
		st, err := stampOf(p)
		if err != nil && errors.Is(err, fs.ErrNotExist) && p != l.dpFile {
			// Gone since the listing, or a symlink to nothing: a ConfigMap key removed
			// leaves its link dangling until the kubelet deletes it after the ..data swap.
			// The file is absent, as it is at the next listing (no refusal logged for it).
			continue
		}
		if err != nil {
			out[i] = cachedFile{err: mesh.Errors{{Source: p, Msg: err.Error()}}}
			l.keepGood(p)
			continue
		}
		if l.maxFile > 0 && st.size > l.maxFile {
			out[i] = cachedFile{err: mesh.Errors{{Source: p, Msg: fmt.Sprintf(
				"the file is %s, over the limit of %s for one file (--max-file-size-mib): split it, or raise the limit",
				mib(st.size), mib(l.maxFile))}}}
			l.keepGood(p)
			continue
		}
		if c, ok := l.cache.get(p); ok && c.stamp == st {
			out[i] = c
			if c.err == nil {
				delete(l.good, p)
			}
			continue
		}
		out[i].stamp = st
		todo = append(todo, i)
	}
	l.decodeParallel(paths, todo, out)
	l.cache.growFor(paths, todo)
	for _, i := range todo {
		prev, had := l.cache.get(paths[i])
		if out[i].err != nil {
			l.keepGood(paths[i])
		} else {
			delete(l.good, paths[i])
		}
		if out[i].readFailed {
			if had {
				l.cache.del(paths[i])
				l.changes++
			}
			continue
		}
		if out[i].err != nil && paths[i] != l.dpFile {
			// A refused file's resources are never served (its last good version is, see
			// lastGood): those decoded beside its errors are garbage now, not held by the
			// cache until the file changes again.
			out[i].res = nil
		}
		// The others are garbage once their file is decoded, and never cached.
		out[i].res = l.reach.Filter(out[i].res)
		// In name order (documents of the same name as in the file), a snapshot finds a
		// large file's resources sorted, instead of sorting them again at every change.
		slices.SortStableFunc(out[i].res, func(a, b mesh.Resource) int {
			return strings.Compare(a.GetMeta().Name, b.GetMeta().Name)
		})
		if l.reach == nil && l.reachKey != "" {
			// Restored files were kept for a list of reachable services no dataplane file
			// has given yet (it failed to decode; a decoded list sets reach): this decode,
			// unfiltered, serves this load's errors only, and is done again once the list
			// is known.
			continue
		}
		if !had || prev.sum != out[i].sum || (prev.err == nil) != (out[i].err == nil) {
			l.changes++
		}
		l.cache.set(paths[i], out[i])
	}
	return out
}

// isOddFile reports whether path, named by a problem of the directory's listing, is a file
// that is not a regular one (a named pipe, a device, a socket): a problem of that file,
// not of the listing.
func isOddFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && !fi.Mode().IsRegular()
}

// keepGood keeps the cache's entry for path, a file refused in this load, as its last
// good version (l.good) when it holds one and none is kept yet.
func (l *dirLoader) keepGood(path string) {
	if path == l.dpFile {
		return
	}
	if _, ok := l.good[path]; ok {
		return
	}
	if c, ok := l.cache.get(path); ok && c.err == nil && !c.readFailed {
		if c.sum == ([32]byte{}) {
			c.sum = l.forgot[path] // forgotten by a forced reload: its content's hash then
		}
		l.good[path] = c
	}
}

// forgetAllBut drops the cached files that are not in paths (gone since the last load).
func (l *dirLoader) forgetAllBut(paths []string) {
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		seen[p] = true
	}
	for p := range l.good {
		if !seen[p] {
			delete(l.good, p)
			l.changes++
		}
	}
	for i := l.cache.len() - 1; i >= 0; i-- { // from the end: a dropped entry takes the last one's place
		if p := l.cache.files[i].path; !seen[p] {
			l.cache.del(p)
			l.changes++
		}
	}
}

// decodeParallel decodes the files at indexes todo on every core. A large file is cut at
// its document separators into pieces decoded side by side; the pieces' resources are
// renumbered to their place in the file ("file#N"). When any piece has a problem, the whole
// file is decoded again in one piece, so errors read exactly as mesh.LoadFile gives them.
// A file of streamMin bytes or more is read a piece at a time while the first pieces
// decode, so that its text is never in memory whole beside the resources it gives.
func (l *dirLoader) decodeParallel(paths []string, todo []int, out []cachedFile) {
	type job struct {
		file, piece int
		data        []byte
	}
	type result struct {
		res []mesh.Resource
		err error
		// kept[i], when set, is the resource decoded before that res[i] equals but for
		// its source (renumbered later); res[i] is then nil, so the fresh copy is garbage
		// as soon as its piece is decoded, not after the whole file (see keptPiece).
		kept []kept
		// docs is how many documents the piece held (res may hold fewer: the dataplanes
		// of services l.reach does not keep are dropped as soon as the piece is decoded).
		docs int
	}
	cores := runtime.GOMAXPROCS(0)
	// Decoding leaves one core to the resolver (and Envoy's xDS), so that a large load
	// never delays answers: workers = cores - 1, at least one.
	workers := max(cores-1, 1)
	var mu sync.Mutex                                     // guards results, data and out's fields the producer sets
	data := make(map[int][]byte)                          // a file read whole, for a decode again in one piece
	results := make(map[int][]result)                     // by file, by piece
	before := make(map[int]map[resourceKey]mesh.Resource) // the previous decode's resources, by file
	reach := l.reach
	next := make(chan job, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				var r result
				if err := l.cancelled(); err != nil {
					r.err = err
				} else {
					r.res, r.err = mesh.Decode(paths[j.file], j.data)
					r.docs = len(r.res)
					if r.err == nil {
						mu.Lock()
						prev := before[j.file]
						mu.Unlock()
						r.kept = keptPiece(prev, r.res)
						r.res, r.kept = keepReachable(reach, r.res, r.kept)
					}
				}
				mu.Lock()
				results[j.file][j.piece] = r
				mu.Unlock()
			}
		}()
	}
	// addPiece makes room for file i's next piece and returns its number.
	addPiece := func(i int) int {
		mu.Lock()
		defer mu.Unlock()
		results[i] = append(results[i], result{})
		return len(results[i]) - 1
	}
	var sumBuf []byte // fileSum's, for every file of the load (a directory of 20,000 files is touched at once)
	for _, i := range todo {
		// A file rewritten with the same bytes (a touch, a ConfigMap resync) is recognised
		// by its hash, read through a small buffer: an inventory of 100,000 dataplanes is
		// not read into memory (15 MB) beside the model it already gave.
		prev, hadPrev := l.cache.get(paths[i])
		if hadPrev && !prev.readFailed && prev.sum != ([32]byte{}) && paths[i] != l.dpFile {
			if sumBuf == nil {
				sumBuf = make([]byte, 64<<10)
			}
			if sum, err := fileSum(paths[i], sumBuf); err == nil && sum == prev.sum {
				out[i].res, out[i].err, out[i].sum = prev.res, prev.err, sum
				continue
			}
		}
		if reuse := l.reuseFrom(paths[i]); len(reuse) > 0 {
			idx := indexResources(reuse)
			mu.Lock() // the workers decode the files before this one meanwhile
			before[i] = idx
			mu.Unlock()
		}
		if st := out[i].stamp; st.size >= streamMin && paths[i] != l.dpFile {
			l.decodes++
			sum, err := streamPieces(paths[i], st.size, cores, func(piece []byte) error {
				if err := l.cancelled(); err != nil {
					return err
				}
				next <- job{file: i, piece: addPiece(i), data: piece}
				return nil
			})
			mu.Lock()
			if err != nil {
				out[i].err, out[i].readFailed = mesh.Errors{{Source: paths[i], Msg: err.Error()}}, true
				// what was sent decodes for nothing: the merge below skips the file
			}
			out[i].sum = sum
			mu.Unlock()
			continue
		}
		b, err := l.readFile(paths[i])
		if err != nil {
			out[i].err = mesh.Errors{{Source: paths[i], Msg: err.Error()}}
			out[i].readFailed = true
			continue
		}
		if paths[i] == l.dpFile {
			if b, err = cplink.RenderVars(b, l.vars); err != nil {
				out[i].err = mesh.Errors{{Source: paths[i], Msg: err.Error()}}
				continue
			}
		}
		sum := sha256.Sum256(b)
		if hadPrev && prev.sum == sum && !prev.readFailed {
			out[i].res, out[i].err, out[i].sum = prev.res, prev.err, sum
			continue // same content: the resources already decoded (and served) stay
		}
		out[i].sum = sum
		l.decodes++
		mu.Lock()
		data[i] = b
		mu.Unlock()
		for _, piece := range splitPieces(b, pieceCount(len(b), cores)) {
			next <- job{file: i, piece: addPiece(i), data: piece}
		}
	}
	close(next)
	wg.Wait()

	for i, rs := range results {
		if out[i].readFailed {
			continue // a streamed file could not be read to its end
		}
		if len(rs) == 1 && rs[0].err != nil {
			out[i].res, out[i].err = rs[0].res, rs[0].err
			out[i].readFailed = l.cancelled() != nil && rs[0].res == nil // a cancelled decode is never cached
			continue
		}
		failed := false
		for _, r := range rs {
			failed = failed || r.err != nil
		}
		if failed {
			if err := l.cancelled(); err != nil {
				out[i].err, out[i].readFailed = err, true // never cached
				continue
			}
			b, ok := data[i]
			if !ok { // streamed: read whole this once, for the errors as they read alone
				var err error
				if b, err = l.readFile(paths[i]); err != nil {
					out[i].err, out[i].readFailed = mesh.Errors{{Source: paths[i], Msg: err.Error()}}, true
					continue
				}
				out[i].sum = sha256.Sum256(b)
			}
			out[i].res, out[i].err = mesh.Decode(paths[i], b)
			continue
		}
		// Without problems every document numbered by mesh is one resource, so a piece's
		// documents come after as many as the pieces before it returned.
		offset := 0
		for _, r := range rs {
			for x, res := range r.res {
				if res == nil { // equal to the one decoded before, but for its number
					k := r.kept[x]
					if src := renumber(k.source, offset); src != k.old.GetMeta().Source {
						// Moved in the file: a copy of the old one with its new place
						// (sharing its maps and strings, which nothing modifies).
						k.old = withSource(k.old, src)
					}
					r.res[x] = k.old
					continue
				}
				if len(rs) > 1 {
					m := res.GetMeta()
					m.Source = renumber(m.Source, offset)
				}
			}
			offset += r.docs
			if len(rs) == 1 {
				out[i].res = r.res
				break
			}
			out[i].res = append(out[i].res, r.res...)
		}
	}
	for i := range results {
		reuseUnchanged(l.reuseFrom(paths[i]), out[i].res)
	}
}

// reuseFrom is what a file decoded again reuses the objects of: its resources as decoded
// before, or, refused then, those of its last good version (the objects served meanwhile).
func (l *dirLoader) reuseFrom(path string) []mesh.Resource {
	if c, ok := l.cache.get(path); ok && !c.readFailed && (c.err == nil || path == l.dpFile) {
		return c.res
	}
	return l.good[path].res
}

// fileSum is the SHA-256 of the file at path, read through buf.
func fileSum(path string, buf []byte) ([32]byte, error) {
	var sum [32]byte
	f, _, err := openRegular(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	// (the file hidden behind a plain Reader: as an io.WriterTo it would copy through a
	// buffer of its own, allocated for each file)
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	return sum, nil
}

// reuseUnchanged replaces each resource of fresh (a file decoded again) that equals the
// one of the same kind, mesh and name decoded from the file before (prev) by that one, and
// gives a Dataplane that did change the tag maps of its unchanged inbounds. Editing one
// dataplane of a large inventory file then leaves the model holding the objects it held:
// no second copy of every other dataplane (the VIP allocator and the default names keep
// references to the objects they saw, and compare the next model by pointer), and the
// fresh copies are garbage at once.
func reuseUnchanged(prev, fresh []mesh.Resource) {
	if len(prev) == 0 || len(fresh) == 0 {
		return
	}
	var byKey map[resourceKey]mesh.Resource
	for i, r := range fresh {
		k := keyOf(r)
		var old mesh.Resource
		if i < len(prev) && keyOf(prev[i]) == k {
			old = prev[i] // most edits keep the order of the file
		} else {
			if byKey == nil {
				byKey = make(map[resourceKey]mesh.Resource, len(prev))
				for _, p := range prev {
					byKey[keyOf(p)] = p
				}
			}
			old = byKey[k]
		}
		if old == nil {
			continue
		}
		if reflect.DeepEqual(old, r) {
			fresh[i] = old
			continue
		}
		a, aok := old.(*mesh.Dataplane)
		b, bok := r.(*mesh.Dataplane)
		if !aok || !bok {
			continue
		}
		for j := range min(len(a.Networking.Inbound), len(b.Networking.Inbound)) {
			if x, y := a.Networking.Inbound[j].Tags, b.Networking.Inbound[j].Tags; x.Equal(y) {
				b.Networking.Inbound[j].Tags = x
			}
		}
	}
}

type resourceKey struct{ kind, mesh, name string }

func keyOf(r mesh.Resource) resourceKey {
	m := r.GetMeta()
	return resourceKey{r.Kind(), m.Mesh, m.Name}
}

// kept is a resource decoded before that a fresh one equals but for its source.
// mergeByName returns the resources of runs (each in name order, as decoded files keep
// them; n in all) in name order, those of one name in the order of their runs - the
// order a snapshot sorts them to, and "first given" for its duplicates - so that building
// it finds them sorted as it reads them. The largest run is copied in stretches between
// the others' resources, each placed by a binary search of it: a one-file change beside a
// large inventory reads a few of the inventory's names, not all of them. With many small
// runs the runs are concatenated and the snapshot sorts them.
func mergeByName(runs [][]mesh.Resource, n int) []mesh.Resource {
	big := -1
	for i, r := range runs {
		if big < 0 || len(r) > len(runs[big]) {
			big = i
		}
	}
	out := make([]mesh.Resource, 0, n)
	if big < 0 || n-len(runs[big]) > len(runs[big])/8 {
		for _, r := range runs {
			out = append(out, r...)
		}
		return out
	}
	type other struct {
		r   mesh.Resource
		run int
	}
	var others []other
	for i, r := range runs {
		if i != big {
			for _, x := range r {
				others = append(others, other{x, i})
			}
		}
	}
	slices.SortStableFunc(others, func(a, b other) int {
		if c := strings.Compare(a.r.GetMeta().Name, b.r.GetMeta().Name); c != 0 {
			return c
		}
		return a.run - b.run
	})
	main := runs[big]
	from := 0
	for _, o := range others {
		name := o.r.GetMeta().Name
		// Before main's resources of the same name when its run comes first, after them
		// otherwise.
		at := from + sort.Search(len(main)-from, func(k int) bool {
			mn := main[from+k].GetMeta().Name
			return mn > name || (mn == name && o.run < big)
		})
		out = append(append(out, main[from:at]...), o.r)
		from = at
	}
	return append(out, main[from:]...)
}

// keepReachable drops from a decoded piece the dataplanes reach does not keep (a nil res[x]
// stands for kept[x].old), so that an inventory is not held whole while it decodes for an
// agent that keeps a few of its services.
func keepReachable(reach *mesh.Reach, res []mesh.Resource, k []kept) ([]mesh.Resource, []kept) {
	if reach == nil {
		return res, k
	}
	n := 0
	for x, r := range res {
		if r == nil {
			r = k[x].old
		}
		if dp, ok := r.(*mesh.Dataplane); ok && !reach.Keeps(dp) {
			continue
		}
		res[n] = res[x]
		if k != nil {
			k[n] = k[x]
		}
		n++
	}
	clear(res[n:])
	if k != nil {
		clear(k[n:])
		k = k[:n]
	}
	return res[:n], k
}

type kept struct {
	old    mesh.Resource
	source mesh.Source // the fresh one's source, numbered within its piece
}

// indexResources indexes a file's resources by kind, mesh and name.
func indexResources(rs []mesh.Resource) map[resourceKey]mesh.Resource {
	m := make(map[resourceKey]mesh.Resource, len(rs))
	for _, r := range rs {
		m[keyOf(r)] = r
	}
	return m
}

// keptPiece finds, for each resource of a piece just decoded, the one of the previous
// decode (prev, by key) it equals but for its source; those are set to nil in res and
// returned in kept (nil when there is none), so a large file edited in one place never
// holds a second copy of everything else while the rest of it decodes.
func keptPiece(prev map[resourceKey]mesh.Resource, res []mesh.Resource) []kept {
	if len(prev) == 0 {
		return nil
	}
	var out []kept
	for i, r := range res {
		old, ok := prev[keyOf(r)]
		if !ok {
			continue
		}
		m := r.GetMeta()
		src := m.Source
		m.Source = old.GetMeta().Source
		same := reflect.DeepEqual(old, r)
		m.Source = src
		if !same {
			continue
		}
		if out == nil {
			out = make([]kept, len(res))
		}
		out[i] = kept{old: old, source: src}
		res[i] = nil
	}
	return out
}

// withSource returns a shallow copy of r with another source (one reflect copy per
// resource, whatever its kind).
func withSource(r mesh.Resource, source mesh.Source) mesh.Resource {
	p := reflect.New(reflect.TypeOf(r).Elem())
	p.Elem().Set(reflect.ValueOf(r).Elem())
	c := p.Interface().(mesh.Resource)
	c.GetMeta().Source = source
	return c
}

// renumber turns document n of a piece of a file into document n+offset of the file (a
// source with no document stays as it is).
func renumber(source mesh.Source, offset int) mesh.Source {
	if source.Doc() == 0 {
		return source
	}
	return source.WithDoc(source.Doc() + offset)
}

// pieceSize is the smallest piece worth decoding on its own core.
const pieceSize = 64 << 10

// pieceCount is how many pieces a file of size bytes is cut into (at most): two per core,
// one per MiB for a larger file.
func pieceCount(size, cores int) int { return max(2*cores, size>>20) }

// cutsBefore reports whether a piece of pieceLen bytes ends before line (a line of the file
// without its newline): a separator once the piece has its target length.
func cutsBefore(line []byte, pieceLen, target int) bool {
	return pieceLen >= target && mesh.IsSeparator(bytes.TrimRight(line, "\r"))
}

// splitPieces cuts data into at most n pieces of roughly equal size, each ending just
// before a document separator line, so that the pieces decode to the same documents as
// the whole. Small or single-document data is one piece.
func splitPieces(data []byte, n int) [][]byte {
	if n < 2 || len(data) < 2*pieceSize {
		return [][]byte{data}
	}
	target := max(len(data)/n, pieceSize)
	var pieces [][]byte
	start := 0
	for i := 0; i < len(data); {
		end := bytes.IndexByte(data[i:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += i
		}
		if cutsBefore(data[i:end], i-start, target) {
			pieces = append(pieces, data[start:i])
			start = i
		}
		i = end + 1
	}
	return append(pieces, data[start:])
}

// streamMin is the size from which a file is read a piece at a time (see decodeParallel).
const streamMin = 4 << 20

// streamPieces reads the file at path (size bytes, as stat'ed) a piece at a time, cut as
// splitPieces cuts a file read whole (a separator line starts the next piece), hands each
// piece to send (a buffer of its own, the caller's from then on), and returns the SHA-256
// of every byte read. An error of send stops it.
func streamPieces(path string, size int64, cores int, send func([]byte) error) (sum [32]byte, err error) {
	f, _, err := openRegular(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	target := max(int(size)/pieceCount(int(size), cores), pieceSize)
	h := sha256.New()
	r := bufio.NewReaderSize(f, 64<<10)
	piece := make([]byte, 0, target+target/4)
	lineStart := true // line begins a line of the file (a long line comes in several reads)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a line longer than the buffer: the rest follows
			err = nil
		}
		if len(line) > 0 {
			h.Write(line)
			whole := lineStart && (line[len(line)-1] == '\n' || err == io.EOF)
			lineStart = line[len(line)-1] == '\n'
			if whole && cutsBefore(bytes.TrimRight(line, "\n"), len(piece), target) {
				if serr := send(piece); serr != nil {
					return sum, serr
				}
				piece = make([]byte, 0, target+target/4)
			}
			piece = append(piece, line...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, err
		}
	}
	if len(piece) > 0 || size == 0 {
		if err := send(piece); err != nil {
			return sum, err
		}
	}
	h.Sum(sum[:0])
	return sum, nil
}

// openRegular opens the file at path for reading, refusing one that is not a regular file:
// a file replaced by a named pipe since it was listed would otherwise hold the load in its
// open until a writer comes (opened without waiting, then checked). It returns the size
// the file has once open.
func openRegular(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		kind := "irregular file"
		switch m := fi.Mode(); {
		case m&fs.ModeNamedPipe != 0:
			kind = "named pipe"
		case m&fs.ModeSocket != 0:
			kind = "socket"
		case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			kind = "device"
		case m.IsDir():
			kind = "directory"
		}
		err = fmt.Errorf("not a regular file (%s): not read", kind)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// readRegular is os.ReadFile for a regular file only (see openRegular).
func readRegular(path string) ([]byte, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, 0, size+1) // +1: the read that finds the end does not grow it
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) { // grown since the stat
			data = append(data, 0)[:len(data)]
		}
	}
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path) // follows symlinks: a ConfigMap swap changes the target
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}
