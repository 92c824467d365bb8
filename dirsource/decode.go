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
