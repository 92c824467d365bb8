package cplink

import (
	"bufio"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/kumadp/kuma-dp/mesh"
)

// What every source keeps on disk between runs (the directory source's decode cache, the
// link's saved model): one gob file per cache, written atomically, read back only by the
// same build.

// The resources a cache file holds, by their interface (mesh.Resource): every kind mesh
// decodes and every kind the link carries, listed from there rather than here, so that a
// kind added to either is saved too (TestSavedModelKeepsEveryKind). A hand-kept list here
// forgot Router and DNSZone, and every save of a model holding one failed.
func init() {
	for _, kind := range append(mesh.ResourceKinds(), Kinds...) {
		if r := mesh.NewResource(kind); r != nil {
			gob.Register(r)
		}
	}
}

// BuildID names this build of the agent (Go version, executable, its size and time): a
// cache file written by another build is not read.
var BuildID = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s|%s|%d|%d", runtime.Version(), exe, fi.Size(), fi.ModTime().UnixNano())
})

// CacheChunk is the most resources one gob message of a cache file holds: the files are
// streams of pieces (a header, then resources in chunks), so that neither writing nor
// reading one holds an encoding of the whole inventory in memory.
const CacheChunk = 512

// WriteCacheFile writes v as one gob message with WriteCacheStream.
func WriteCacheFile(path, pattern string, v any) error {
	return WriteCacheStream(path, pattern, func(enc *gob.Encoder) error { return enc.Encode(v) })
}

// WriteCacheStream has encode write a gob stream straight into a temporary file beside
// path (pattern names it, so a start can remove the leftovers of a write cut short) and
// renames it over path: readers see the old file or the new one, never half of one. The
// file is owner-only.
func WriteCacheStream(path, pattern string, encode func(*gob.Encoder) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 64<<10)
	if err := encode(gob.NewEncoder(w)); err != nil {
		tmp.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
