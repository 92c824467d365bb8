package dirsource

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// decodeAll returns each file's resources, decoding in parallel only those whose stamp
// changed since the last load. A file decoded now keeps only the dataplanes l.reach keeps.
func (l *dirLoader) decodeAll(paths []string) []cachedFile {
	out := make([]cachedFile, len(paths))
	todo := l.toDecode(paths, out)
	names := make([]*string, len(paths))
	for _, i := range todo {
		names[i] = l.cache.nameFor(paths[i])
	}
	l.decodeParallel(paths, names, todo, out)
	l.cache.growFor(paths, todo)
	for _, i := range todo {
		prev, had := l.cache.kept(paths[i])
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
		var name *string
		out[i].list, name = l.cache.set(paths[i], out[i], names[i])
		l.ownSources(out[i].res, paths[i], name)
	}
	return out
}

// toDecode fills out with what paths need no decode (gone, unreadable, over the size
// limit, or cached at the same stamp) and returns the indexes of the others, their stamps
// set.
func (l *dirLoader) toDecode(paths []string, out []cachedFile) []int {
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
		if c, ok := l.cache.kept(p); ok && c.stamp == st {
			c.res = c.list.all()
			out[i] = c
			if c.err == nil {
				delete(l.good, p)
			}
			continue
		}
		out[i].stamp = st
		todo = append(todo, i)
	}
	return todo
}

// ownSources makes the sources of rs, the resources of the file at path as decoded now,
// name the file with name, the file cache's string for it, instead of the name interned
// for them (mesh.NewSource): once no source holds it, the interning table drops its entry,
// ~200 bytes beside the name's text (a directory of a file per dataplane: one a file).
// Resources decoded before, given back for what did not change (and served), name it so
// already, and are not written; a file that gives back only those (a touch) interns
// nothing (100,000 files touched made 100,000 entries the table frees only collections
// later: +16 MiB).
func (l *dirLoader) ownSources(rs []mesh.Resource, path string, name *string) {
	var interned mesh.Source
	for _, r := range rs {
		m := r.GetMeta()
		if m.Source.In(name) == m.Source {
			continue // named with name already (or another file's)
		}
		if interned.IsZero() {
			interned = l.intern(path, 0) // the fresh resources' name, held by them
		}
		if m.Source.SameFile(interned) {
			m.Source = m.Source.In(name)
		}
	}
}

// isOddFile reports whether path, named by a problem of the directory's listing, is a file
// that is not a regular one (a named pipe, a device, a socket): a problem of that file,
// not of the listing.
func isOddFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && !fi.Mode().IsRegular()
}

// decodeParallel decodes the files at indexes todo on every core. A large file is cut at
// its document separators into pieces decoded side by side; the pieces' resources are
// renumbered to their place in the file ("file#N"). When any piece has a problem, the whole
// file is decoded again in one piece, so errors read exactly as mesh.LoadFile gives them.
// A file of streamMin bytes or more is read a piece at a time while the first pieces
// decode, so that its text is never in memory whole beside the resources it gives.
//
// A piece's fresh resources name their file with names[i] (see ownSources) as soon as it
// is decoded: the name mesh interned for them is then garbage at once, not held until
// every file is decoded (a directory of 100,000 files: ~20 MB more at the peak).
func (l *dirLoader) decodeParallel(paths []string, names []*string, todo []int, out []cachedFile) {
	cores := runtime.GOMAXPROCS(0)
	// Decoding leaves one core to the resolver (and Envoy's xDS), so that a large load
	// never delays answers: workers = cores - 1, at least one.
	workers := max(cores-1, 1)
	d := &parallelDecode{l: l, paths: paths, names: names, out: out, cores: cores, reach: l.reach,
		data: make(map[int][]byte), results: make(map[int][]pieceResult),
		before: make(map[int]map[resourceKey]mesh.Resource), next: make(chan pieceJob, workers)}
	for range workers {
		d.wg.Add(1)
		go d.work()
	}
	for _, i := range todo {
		d.send(i)
	}
	close(d.next)
	d.wg.Wait()
	for i, rs := range d.results {
		d.finish(i, rs)
	}
	for i := range d.results {
		reuseUnchanged(l.reuseFrom(paths[i]), out[i].res)
	}
	for _, i := range d.whole {
		reuseUnchanged(l.reuseFrom(paths[i]), out[i].res)
	}
}

// pieceJob is a piece of a file for a worker to decode; whole: the file's only piece
// (finished by the worker, see work).
type pieceJob struct {
	file, piece int
	data        []byte
	whole       bool
}

// pieceResult is a decoded piece.
type pieceResult struct {
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

// parallelDecode is one decodeParallel: the files sent to the workers as pieces, and
// their pieces' results.
type parallelDecode struct {
	l     *dirLoader
	paths []string
	names []*string // by file, the name its resources' sources are to give it
	out   []cachedFile
	cores int
	reach *mesh.Reach
	next  chan pieceJob
	wg    sync.WaitGroup

	mu      sync.Mutex                            // guards results, data, before, whole and out's fields send sets
	data    map[int][]byte                        // a file read whole, for a decode again in one piece
	results map[int][]pieceResult                 // by file, by piece: the files of several pieces
	whole   []int                                 // the files of one piece (finished by the workers)
	before  map[int]map[resourceKey]mesh.Resource // the previous decode's resources, by file
	sumBuf  []byte                                // fileSum's, for every file of the load (a directory of 20,000 files is touched at once)
}

// work decodes the pieces sent until next is closed.
func (d *parallelDecode) work() {
	defer d.wg.Done()
	for j := range d.next {
		var r pieceResult
		if err := d.l.cancelled(); err != nil {
			r.err = err
		} else {
			r.res, r.err = mesh.Decode(d.paths[j.file], j.data)
			r.docs = len(r.res)
			if r.err == nil {
				d.mu.Lock()
				prev := d.before[j.file]
				d.mu.Unlock()
				r.kept = keptPiece(prev, r.res)
				r.res, r.kept = keepReachable(d.reach, r.res, r.kept)
				r.own(d.names[j.file])
			}
		}
		if j.whole {
			// Finished at once, so that a directory of many small files holds no piece
			// result of each until the last is decoded (100,000 files: ~13 MB at the
			// peak). out[i] is the worker's from the job's receipt (send set it before)
			// until the workers are done; a piece alone never decodes again (decodeWhole).
			d.finish(j.file, []pieceResult{r})
			continue
		}
		d.mu.Lock()
		d.results[j.file][j.piece] = r
		d.mu.Unlock()
	}
}

// own makes the piece's fresh resources (and the sources kept resources are to take) name
// their file with name, instead of the name mesh interned for them.
func (r *pieceResult) own(name *string) {
	for _, res := range r.res {
		if res != nil {
			m := res.GetMeta()
			m.Source = m.Source.In(name)
		}
	}
	for x := range r.kept {
		r.kept[x].source = r.kept[x].source.In(name)
	}
}

// addPiece makes room for file i's next piece and returns its number.
func (d *parallelDecode) addPiece(i int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.results[i] = append(d.results[i], pieceResult{})
	return len(d.results[i]) - 1
}

// send sends file i to the workers in pieces, unless it is unchanged since the last
// decode (then out[i] is its cached result) or cannot be read.
func (d *parallelDecode) send(i int) {
	l, path, out := d.l, d.paths[i], &d.out[i]
	// A file rewritten with the same bytes (a touch, a ConfigMap resync) is recognised
	// by its hash, read through a small buffer: an inventory of 100,000 dataplanes is
	// not read into memory (15 MB) beside the model it already gave.
	prev, hadPrev := l.cache.kept(path) // its resources read back only when they stay
	if hadPrev && !prev.readFailed && prev.sum != (digest{}) && path != l.dpFile {
		if d.sumBuf == nil {
			d.sumBuf = make([]byte, 64<<10)
		}
		if sum, err := fileSum(path, d.sumBuf); err == nil && sum == prev.sum {
			out.res, out.list, out.err, out.sum = prev.list.all(), prev.list, prev.err, sum
			return
		}
	}
	if reuse := l.reuseFrom(path); len(reuse) > 0 {
		idx := indexResources(reuse)
		d.mu.Lock() // the workers decode the files before this one meanwhile
		d.before[i] = idx
		d.mu.Unlock()
	}
	if st := out.stamp; st.size >= streamMin && path != l.dpFile {
		d.stream(i, st.size)
		return
	}
	b, err := l.readFile(path)
	if err != nil {
		out.err = mesh.Errors{{Source: path, Msg: err.Error()}}
		out.readFailed = true
		return
	}
	if path == l.dpFile {
		if b, err = cplink.RenderVars(b, l.vars); err != nil {
			out.err = mesh.Errors{{Source: path, Msg: err.Error()}}
			return
		}
	}
	sum := digestOf(b)
	if hadPrev && prev.sum == sum && !prev.readFailed {
		out.res, out.list, out.err, out.sum = prev.list.all(), prev.list, prev.err, sum
		return // same content: the resources already decoded (and served) stay
	}
	out.sum = sum
	l.decodes++
	pieces := splitPieces(b, pieceCount(len(b), d.cores))
	if len(pieces) == 1 {
		// never decoded again in one piece: its text is garbage once decoded, not held
		// until every file is (a directory of 100,000 small files: 20 MB more at the
		// peak), and the worker finishes it (work)
		d.mu.Lock()
		d.whole = append(d.whole, i)
		d.mu.Unlock()
		d.next <- pieceJob{file: i, data: b, whole: true}
		return
	}
	d.mu.Lock()
	d.data[i] = b // for a decode again in one piece (decodeWhole)
	d.mu.Unlock()
	for _, piece := range pieces {
		d.next <- pieceJob{file: i, piece: d.addPiece(i), data: piece}
	}
}

// stream sends file i, of size bytes, a piece at a time as it is read.
func (d *parallelDecode) stream(i int, size int64) {
	l, path := d.l, d.paths[i]
	l.decodes++
	sum, err := streamPieces(path, size, d.cores, func(piece []byte) error {
		if err := l.cancelled(); err != nil {
			return err
		}
		d.next <- pieceJob{file: i, piece: d.addPiece(i), data: piece}
		return nil
	})
	d.mu.Lock()
	if err != nil {
		d.out[i].err, d.out[i].readFailed = mesh.Errors{{Source: path, Msg: err.Error()}}, true
		// what was sent decodes for nothing: finish skips the file
	}
	d.out[i].sum = sum
	d.mu.Unlock()
}

// finish sets out[i] from file i's decoded pieces rs: joined and renumbered, or, when a
// piece had a problem, the whole file decoded again in one piece.
func (d *parallelDecode) finish(i int, rs []pieceResult) {
	out := &d.out[i]
	if out.readFailed {
		return // a streamed file could not be read to its end
	}
	if len(rs) == 1 && rs[0].err != nil {
		out.res, out.err = rs[0].res, rs[0].err
		out.readFailed = d.l.cancelled() != nil && rs[0].res == nil // a cancelled decode is never cached
		return
	}
	for _, r := range rs {
		if r.err != nil {
			d.decodeWhole(i)
			return
		}
	}
	// Without problems every document numbered by mesh is one resource, so a piece's
	// documents come after as many as the pieces before it returned.
	offset := 0
	for _, r := range rs {
		restoreKept(r, offset, len(rs) > 1)
		offset += r.docs
		if len(rs) == 1 {
			out.res = r.res
			break
		}
		out.res = append(out.res, r.res...)
	}
}

// decodeWhole decodes file i again in one piece, for its errors as they read alone.
func (d *parallelDecode) decodeWhole(i int) {
	out, path := &d.out[i], d.paths[i]
	if err := d.l.cancelled(); err != nil {
		out.err, out.readFailed = err, true // never cached
		return
	}
	b, ok := d.data[i]
	if !ok { // streamed: read whole this once
		var err error
		if b, err = d.l.readFile(path); err != nil {
			out.err, out.readFailed = mesh.Errors{{Source: path, Msg: err.Error()}}, true
			return
		}
		out.sum = digestOf(b)
	}
	out.res, out.err = mesh.Decode(path, b)
}

// restoreKept puts in r.res, in place of each resource equal to one decoded before, that
// one (with its new place in the file, when it moved), and, when the file came in several
// pieces, numbers the piece's fresh resources after the offset documents before it.
func restoreKept(r pieceResult, offset int, pieces bool) {
	for x, res := range r.res {
		if res == nil { // equal to the one decoded before, but for its number
			k := r.kept[x]
			if src := renumber(k.source, offset); !src.Same(k.old.GetMeta().Source) {
				// Moved in the file: a copy of the old one with its new place
				// (sharing its maps and strings, which nothing modifies).
				k.old = withSource(k.old, src)
			}
			r.res[x] = k.old
			continue
		}
		if pieces {
			m := res.GetMeta()
			m.Source = renumber(m.Source, offset)
		}
	}
}

// reuseFrom is what a file decoded again reuses the objects of: its resources as decoded
// before, or, refused then, those of its last good version (the objects served meanwhile).
func (l *dirLoader) reuseFrom(path string) []mesh.Resource {
	if c, ok := l.cache.get(path); ok && !c.readFailed && (c.err == nil || path == l.dpFile) {
		return c.res
	}
	return l.good[path].list.all()
}

// fileSum is the digest of the file at path, read through buf.
func fileSum(path string, buf []byte) (digest, error) {
	var sum digest
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
	return digestSum(h), nil
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
