package dirsource

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// The decode cache survives restarts in the work dir: on start, a file whose size,
// modification time and inode are those recorded is not decoded again. Decoding YAML is
// most of a start with a large inventory (about 470 ms for 10,000 dataplanes, against 25 ms
// to read them back from this cache). Only files that decoded without a problem are kept,
// and the whole cache is dropped when the kuma-dp binary changes (a new version may decode
// or validate differently).

// The cache file is a gob stream written and read one piece at a time, so that neither
// side holds an encoding of the whole inventory in memory: a cacheHeader, then for each
// file a cachedFileHead followed by its resources in chunks of at most cplink.CacheChunk.
type cacheHeader struct {
	Build string
	Count int // files that follow
	// Reach is the filter the files' dataplanes were kept with (dirLoader.reachKey).
	Reach string
}

type cachedFileHead struct {
	Path        string
	Size, MTime int64
	Ino         uint64
	Resources   int
}

// restore fills the in-memory cache from path; a missing, unreadable or stale file is
// ignored (everything is decoded as usual).
func (l *dirLoader) restore(path string) (int, error) {
	// Temporary files of a write cut short (the agent killed mid-write) go first.
	if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".decode-cache-*")); len(stale) > 0 {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	dec := gob.NewDecoder(bufio.NewReaderSize(f, 64<<10))
	var h cacheHeader
	if err := dec.Decode(&h); err != nil {
		return 0, fmt.Errorf("decode cache %s: %w", path, err)
	}
	if h.Build == "" || h.Build != cplink.BuildID() {
		return 0, nil
	}
	if len(l.cache) > 0 && h.Reach != l.reachKey {
		return 0, nil // filtered for other reachable services than what is held
	}
	files := make(map[string]cachedFile, h.Count)
	for range h.Count {
		var fh cachedFileHead
		if err := dec.Decode(&fh); err != nil {
			return 0, fmt.Errorf("decode cache %s: %w", path, err)
		}
		res := make([]mesh.Resource, 0, fh.Resources)
		for len(res) < fh.Resources {
			var chunk []mesh.Resource
			if err := dec.Decode(&chunk); err != nil {
				return 0, fmt.Errorf("decode cache %s: %w", path, err)
			}
			if len(chunk) == 0 || len(res)+len(chunk) > fh.Resources {
				return 0, fmt.Errorf("decode cache %s: %s holds more resources than announced", path, fh.Path)
			}
			res = append(res, chunk...)
		}
		mesh.Settle(res) // gob allocated them between its own garbage; replicas share tag maps
		files[fh.Path] = cachedFile{stamp: fileStamp{size: fh.Size, mtime: fh.MTime, ino: fh.Ino}, res: res}
	}
	maps.Copy(l.cache, files)
	l.reachKey = h.Reach
	return len(files), nil
}

// persist writes the files that decoded cleanly to path (atomically, owner-only), when
// something was decoded since the last write; wrote says whether it did.
func (l *dirLoader) persist(path string) (wrote bool, err error) {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return false, nil
	}
	type file struct {
		head cachedFileHead
		res  []mesh.Resource
	}
	var files []file
	for name, c := range l.cache {
		if c.err == nil && name != l.dpFile {
			files = append(files, file{cachedFileHead{Path: name, Size: c.stamp.size, MTime: c.stamp.mtime,
				Ino: c.stamp.ino, Resources: len(c.res)}, c.res})
		}
	}
	l.dirty = false
	reach := l.reachKey
	l.mu.Unlock()

	err = cplink.WriteCacheStream(path, ".decode-cache-*", func(enc *gob.Encoder) error {
		if err := enc.Encode(cacheHeader{Build: cplink.BuildID(), Count: len(files), Reach: reach}); err != nil {
			return err
		}
		for _, f := range files {
			if err := enc.Encode(f.head); err != nil {
				return err
			}
			for rs := range slices.Chunk(f.res, cplink.CacheChunk) {
				if err := enc.Encode(rs); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("decode cache: %w", err)
	}
	return true, nil
}
