package dirsource

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/internal/gcpace"
	"github.com/kumadp/kuma-dp/mesh"
)

// The decode cache survives restarts in the work dir: on start, a file whose size,
// modification time and inode are those recorded, or whose content has the SHA-256
// recorded, is not decoded again. Decoding YAML is most of a start with a large inventory
// (about 470 ms for 10,000 dataplanes, against 25 ms to read them back from this cache).
// Only files that decoded without a problem are kept (a file refused keeps the entry of
// its last good version, dirLoader.good, which a restart serves), and the cache is dropped when the
// kuma-dp binary changes (a new version may decode or validate differently).
//
// The cache is a directory with one entry per large source file and one entry for all the
// small ones, so that what a change costs is what it changed: a write adds the entries of
// the files decoded to new resources since the last write and removes those of the files
// gone; an inventory file that did not change is never written again.
// Files under bundleBelow bytes share one entry (the bundle), written again when any of
// them changes: a directory of a file per resource (20,000 of them) would otherwise cost
// 20,000 entries, each a file with gob's type descriptions of its own (1.6 KB, 80 MB on
// disk), written in 7 s and read back slower than the files decode.
//
// An entry's name is a hash of its file's path (the bundle: of a fixed key) and a hash of
// what its resources depend on (the build, the reachable services' key and the content of
// its files), so the directory's listing says which entries are current without reading
// them. An entry is a gob stream read and written one piece at a time, so that neither side
// holds an encoding of a whole inventory file in memory: for each of its files (one, or
// the bundle's in path order), a cacheEntry, then the file's resources in chunks of at most
// cplink.CacheChunk.
//
// A file whose stamp changed but whose content did not (a touch, a Kubernetes ConfigMap
// update, which gives every file of the volume a new inode) keeps its entry and the stamp
// recorded in it: the next start hashes that file instead of decoding it.
type cacheEntry struct {
	Build string
	// Reach is the filter the file's dataplanes were kept with (dirLoader.reachKey).
	Reach       string
	Path        string
	Size, MTime int64
	Ino         uint64
	Digest      digest // of the file's content (cachedFile.sum)
	Resources   int    // in the chunks that follow
}

// cacheTemp names the temporary files of a write in progress; a start removes them.
const cacheTemp = ".decode-cache-*"

// bundleBelow is the size under which a file's resources go to the bundle entry rather
// than to an entry of their own. A file under it decodes in well under a millisecond; its
// own entry would cost more to write and to read back than that.
const bundleBelow = 64 << 10

// bundleKey stands for the path in the name of the bundle entry (no file's path is empty).
const bundleKey = ""

// legacyCacheFile is the previous format's single file (the whole cache in one stream)
// for the cache directory dir: it is never read, and removed at the first write.
func legacyCacheFile(dir string) string { return filepath.Clean(dir) + ".gob" }

// entryName is the name of the entry for path holding resources decoded by build, kept
// for reach, from content of digest sum.
func entryName(path, build, reach string, sum digest) string {
	p := sha256.Sum256([]byte(path))
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(build), build, len(reach), reach)
	h.Write(sum[:])
	return hex.EncodeToString(p[:8]) + "-" + hex.EncodeToString(h.Sum(nil)[:8]) + ".gob"
}

// bundleName is the name of the bundle entry holding the files of heads (in path order).
func bundleName(build, reach string, heads []cacheEntry) string {
	return bundleNameOf(build, reach, len(heads), func(i int) *cacheEntry { return &heads[i] })
}

// bundleNameOf is bundleName of the n heads head(0)...
func bundleNameOf(build, reach string, n int, head func(int) *cacheEntry) string {
	h := sha256.New()
	for i := range n {
		e := head(i)
		fmt.Fprintf(h, "%d:%s", len(e.Path), e.Path)
		h.Write(e.Digest[:])
	}
	return entryName(bundleKey, build, reach, digestSum(h))
}

// isEntryName reports whether name is shaped as entryName makes them.
func isEntryName(name string) bool {
	hexes, ok := strings.CutSuffix(name, ".gob")
	if !ok || len(hexes) != 33 || hexes[16] != '-' {
		return false
	}
	_, err1 := hex.DecodeString(hexes[:16])
	_, err2 := hex.DecodeString(hexes[17:])
	return err1 == nil && err2 == nil
}

// restore fills the in-memory cache from the entries in dir and returns how many it
// restored. An entry of another build is removed; one that cannot be read or is corrupt is
// removed too, and named in err: its file is decoded as usual (and written again). The
// newest entries say which reachable services the cache is for (a write cut short after
// the list changed leaves older entries for the old list: they are removed).
func (l *dirLoader) restore(dir string) (n int, err error) {
	names, err := cacheEntryNames(dir)
	if err != nil {
		return 0, fmt.Errorf("decode cache %s: %w", dir, err)
	}
	l.mu.Lock()
	r := entryRestore{build: cplink.BuildID(), reach: l.reachKey, reachSet: l.cache.len() > 0,
		files: make(map[string]cachedFile, len(names))}
	l.mu.Unlock()
	var errs []error
	for _, name := range names {
		remove, err := r.read(dir, name)
		if err != nil {
			errs = append(errs, err)
		}
		if remove {
			// Gone, its file is decoded and written again (a broken entry would otherwise
			// stand for its file's content forever: the next write sees its name there).
			os.Remove(filepath.Join(dir, name))
		}
	}
	if len(r.files) > 0 {
		l.mu.Lock()
		l.cache.grow(len(r.files)) // (a restore comes first: the cache holds none of them)
		for p, c := range r.files {
			_, name := l.cache.set(p, c, nil)
			l.ownSources(c.res, p, name) // (not served yet)
		}
		l.cache.dropIndex()
		l.reachKey = r.reach
		l.mu.Unlock()
	}
	return len(r.files), errors.Join(errs...)
}

// cacheEntryNames is the names of the cache entries in dir, newest first (none when dir
// does not exist). It removes the temporary files of writes cut short (the agent killed
// mid-write).
func cacheEntryNames(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type entry struct {
		name  string
		mtime time.Time
	}
	var entries []entry
	for _, de := range des {
		if ok, _ := filepath.Match(cacheTemp, de.Name()); ok {
			os.Remove(filepath.Join(dir, de.Name()))
			continue
		}
		if !isEntryName(de.Name()) || !de.Type().IsRegular() {
			continue
		}
		e := entry{name: de.Name()}
		if fi, err := de.Info(); err == nil {
			e.mtime = fi.ModTime()
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b entry) int { // newest first
		return cmp.Or(b.mtime.Compare(a.mtime), strings.Compare(a.name, b.name))
	})
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	return names, nil
}

// entryRestore is a restore under way: the files restored so far, by path, and the
// reachable services (their key) the cache is for.
type entryRestore struct {
	build, reach string
	reachSet     bool
	files        map[string]cachedFile
}

// read restores the entry named name in dir (its files all, or none of them), or says
// whether it is to be removed.
func (r *entryRestore) read(dir, name string) (remove bool, err error) {
	path := filepath.Join(dir, name)
	heads, got, err := decodeEntry(path, r.build)
	if err != nil || heads == nil {
		return true, err // broken, or another build's
	}
	h := heads[0]
	if name != bundleName(r.build, h.Reach, heads) && (len(heads) > 1 || name != entryName(h.Path, r.build, h.Reach, h.Digest)) {
		return true, fmt.Errorf("decode cache entry %s: its headers do not match its name", path)
	}
	if !r.reachSet {
		r.reach, r.reachSet = h.Reach, true
	}
	if h.Reach != r.reach {
		return true, nil // kept for other reachable services
	}
	settler := mesh.NewSettler() // the entry's files share string blocks (many small files: one block, not one each)
	for i, c := range got {
		if _, dup := r.files[heads[i].Path]; dup {
			continue // an older entry of a file restored already: the next write removes it
		}
		settler.Settle(c.res) // gob allocated them between its own garbage; replicas share tag maps
		r.files[heads[i].Path] = c
	}
	return false, nil
}

// decodeEntry decodes the cache entry at path: the heads of its files and what they hold;
// none, without an error, for an entry of another build.
func decodeEntry(path, build string) ([]cacheEntry, []cachedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("decode cache entry %s: %w", path, err)
	}
	defer f.Close()
	dec := gob.NewDecoder(bufio.NewReaderSize(f, 64<<10))
	var heads []cacheEntry
	var got []cachedFile
	for {
		var h cacheEntry
		if err := dec.Decode(&h); err != nil {
			if errors.Is(err, io.EOF) && len(heads) > 0 {
				return heads, got, nil
			}
			return nil, nil, fmt.Errorf("decode cache entry %s: %w", path, err)
		}
		if h.Build == "" || h.Build != build {
			return nil, nil, nil // another build's
		}
		if h.Resources < 0 || h.Path == bundleKey || (len(heads) > 0 && (h.Reach != heads[0].Reach || h.Path <= heads[len(heads)-1].Path)) {
			return nil, nil, fmt.Errorf("decode cache entry %s: a header out of place", path)
		}
		res := make([]mesh.Resource, 0, h.Resources)
		for len(res) < h.Resources {
			var chunk []mesh.Resource
			if err := dec.Decode(&chunk); err != nil {
				return nil, nil, fmt.Errorf("decode cache entry %s (%s): %w", path, h.Path, err)
			}
			if len(chunk) == 0 || len(res)+len(chunk) > h.Resources {
				return nil, nil, fmt.Errorf("decode cache entry %s: %s holds more resources than announced", path, h.Path)
			}
			res = append(res, chunk...)
		}
		heads = append(heads, h)
		got = append(got, cachedFile{stamp: fileStamp{size: h.Size, mtime: h.MTime, ino: h.Ino}, sum: h.Digest, res: res})
	}
}

// cacheWrite is what a write of the decode cache did.
type cacheWrite struct {
	entries   int   // entries written
	resources int   // the resources they hold
	bytes     int64 // their size
	removed   int   // entries removed (their file gone, failing, or decoded anew)
}

func (w cacheWrite) changed() bool { return w.entries+w.removed > 0 }

// persist writes the decode cache to dir (see writeCache); wrote says whether anything
// changed there.
func (l *dirLoader) persist(dir string) (wrote bool, err error) {
	w, err := l.writeCache(dir)
	return w.changed(), err
}

// writeCache brings the entries in dir up to the files held: each file that decoded
// cleanly and has no current entry gets one (written atomically, owner-only), and the
// entries of files no longer held, or held with other resources, are removed. A write that
// fails leaves that file without an entry (it is decoded at the next start); the others
// are still written.
func (l *dirLoader) writeCache(dir string) (w cacheWrite, err error) {
	build := cplink.BuildID()
	if build == "" {
		return w, nil // a build that cannot name itself could not read the cache back
	}
	want, changes, ok := l.cacheEntries(build)
	if !ok {
		return w, nil // what the last write wrote is still what the cache holds
	}
	have, err := entriesIn(dir)
	if err != nil {
		return w, fmt.Errorf("decode cache: %w", err)
	}
	errs := l.writeEntries(dir, want, have, &w)
	// A write that failed (a full disk) leaves the entries it would have replaced: they
	// still serve the files that did not change at the next start, and a later write
	// removes them.
	if len(errs) == 0 {
		errs = removeEntries(dir, want, have, &w)
	}
	if w.changed() {
		if err := os.Remove(legacyCacheFile(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return w, fmt.Errorf("decode cache: %w", err)
	}
	l.mu.Lock()
	l.written = changes
	l.mu.Unlock()
	return w, nil
}

// cacheFile is a file's entry in the decode cache: its head and its resources.
type cacheFile struct {
	head cacheEntry
	list resList // read back when written
}

// cacheEntries is what the decode cache must hold now, by entry name: an entry of its own
// for each file of bundleBelow bytes or more, one bundle for the smaller ones (each in path
// order). It also returns the changes count it stands for; ok is false when the last write
// wrote as much.
func (l *dirLoader) cacheEntries(build string) (want map[string][]cacheFile, changes uint64, ok bool) {
	l.mu.Lock()
	changes = l.changes
	if changes == l.written {
		l.mu.Unlock()
		return nil, changes, false
	}
	// A directory of a file per dataplane writes them all in the bundle: their list is
	// made at its size, where appends grew it by copies of up to twice that (100,000
	// files: 11 MB, against up to 22 at the peak), and the bundle's name is hashed from
	// it, not from a copy of its heads.
	paths := l.cachedPaths()
	want = map[string][]cacheFile{}
	bundle := make([]cacheFile, 0, len(paths))
	for _, path := range paths {
		c, _ := l.cache.kept(path)
		if g, ok := l.good[path]; ok && (c.err != nil || c.readFailed || c.sum == (digest{})) {
			c = g // refused: its last good version's entry stays, for a restart to serve it
		}
		if c.err != nil || c.readFailed || path == l.dpFile || c.sum == (digest{}) {
			continue // failed, or not known to hold what its file holds (forget)
		}
		f := cacheFile{cacheEntry{Build: build, Reach: l.reachKey, Path: path, Size: c.stamp.size,
			MTime: c.stamp.mtime, Ino: c.stamp.ino, Digest: c.sum, Resources: int(c.list.n)}, c.list}
		if c.stamp.size < bundleBelow {
			bundle = append(bundle, f)
			continue
		}
		want[entryName(path, build, l.reachKey, c.sum)] = []cacheFile{f}
	}
	reach := l.reachKey
	l.cache.dropIndex()
	l.mu.Unlock()
	if len(bundle) > 0 {
		want[bundleNameOf(build, reach, len(bundle), func(i int) *cacheEntry { return &bundle[i].head })] = bundle
	}
	return want, changes, true
}

// cachedPaths are the paths of the cache's files and of the last good versions kept,
// sorted (l.mu held).
func (l *dirLoader) cachedPaths() []string {
	paths := make([]string, 0, l.cache.len())
	for i := range l.cache.files { // (not all(): the files' lists are not read)
		paths = append(paths, *l.cache.files[i].name)
	}
	for p := range l.good {
		if _, ok := l.cache.kept(p); !ok {
			paths = append(paths, p) // unreadable now: its entry is no more in the cache
		}
	}
	slices.Sort(paths)
	return paths
}

// entriesIn is the names of the cache entries in dir, which it makes when missing.
func entriesIn(dir string) (map[string]bool, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(des))
	for _, de := range des {
		if isEntryName(de.Name()) {
			have[de.Name()] = true
		}
	}
	return have, nil
}

// writeEntries writes the entries of want that dir does not have, counting them in w.
func (l *dirLoader) writeEntries(dir string, want map[string][]cacheFile, have map[string]bool, w *cacheWrite) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if have[name] {
			continue
		}
		fs := want[name]
		path := filepath.Join(dir, name)
		n := 0
		for _, f := range fs {
			n += int(f.list.n)
		}
		restoreGC := func() {}
		if n > freeAfterResources {
			// Encoding leaves ~130 bytes of garbage a resource: collected as it goes, the
			// heap does not grow by 13 MB for 100,000 dataplanes right after the first
			// model (the agent's peak, beside the pages the resolver's start mapped).
			restoreGC = gcpace.Low(cacheWriteGCPercent)
		}
		err := l.writeEntry(path, cacheTemp, func(enc *gob.Encoder) error {
			for _, f := range fs {
				if err := enc.Encode(f.head); err != nil {
					return err
				}
				for rs := range slices.Chunk(f.list.all(), cplink.CacheChunk) {
					if err := enc.Encode(rs); err != nil {
						return err
					}
				}
			}
			return nil
		})
		restoreGC()
		what := fs[0].head.Path
		if len(fs) > 1 {
			what = fmt.Sprintf("the %d files under %s", len(fs), mib(bundleBelow))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		w.entries++
		w.resources += n
		if fi, err := os.Stat(path); err == nil {
			w.bytes += fi.Size()
		}
	}
	return errs
}

// removeEntries removes the entries dir has and want does not, counting them in w; it
// stops at the first it cannot remove.
func removeEntries(dir string, want map[string][]cacheFile, have map[string]bool, w *cacheWrite) []error {
	for name := range have {
		if _, ok := want[name]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return []error{err}
		}
		w.removed++
	}
	return nil
}
