package cplink

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

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
	cache map[string]cachedFile
	// decodes counts files decoded (not served from the cache), for tests.
	decodes int
}

type fileStamp struct {
	size, mtime int64
	ino         uint64
}

type cachedFile struct {
	stamp fileStamp
	res   []mesh.Resource
	err   error
}

func newDirLoader() *dirLoader { return &dirLoader{cache: map[string]cachedFile{}} }

// forget drops every decoded file: the next load reads them all.
func (l *dirLoader) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.cache)
}

// Load reads the dataplane file and the directory.
func (l *dirLoader) Load(dataplaneFile, policiesDir string) (*mesh.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs mesh.Errors
	var paths []string
	if policiesDir != "" {
		var walkErrs mesh.Errors
		paths, walkErrs = resourceFiles(policiesDir)
		errs = append(errs, walkErrs...)
	}
	results := l.decodeAll(append([]string{dataplaneFile}, paths...))

	self, selfErrs := selfDataplane(dataplaneFile, results[0])
	errs = append(selfErrs, errs...)
	var resources []mesh.Resource
	for _, r := range results[1:] {
		resources = append(resources, r.res...)
		errs = appendErrors(errs, r.err)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return mesh.NewSnapshot(self, resources)
}

// selfDataplane applies mesh.Load's rule to the dataplane file: exactly one Dataplane.
func selfDataplane(path string, r cachedFile) (*mesh.Dataplane, mesh.Errors) {
	errs := appendErrors(nil, r.err)
	switch {
	case len(r.res) == 1:
		if dp, ok := r.res[0].(*mesh.Dataplane); ok {
			return dp, errs
		}
		m := r.res[0].GetMeta()
		errs = append(errs, &mesh.FieldError{Source: m.Source, Kind: r.res[0].Kind(), Name: m.Name,
			Msg: "the dataplane file must hold a Dataplane"})
	case len(r.res) > 1:
		errs = append(errs, &mesh.FieldError{Source: path,
			Msg: fmt.Sprintf("the dataplane file must hold exactly one Dataplane, found %d resources", len(r.res))})
	case r.err == nil:
		errs = append(errs, &mesh.FieldError{Source: path, Msg: "no Dataplane in the dataplane file"})
	}
	return nil, errs
}

// decodeAll returns each file's resources, decoding in parallel only those whose stamp
// changed since the last load; files no longer present are forgotten.
func (l *dirLoader) decodeAll(paths []string) []cachedFile {
	out := make([]cachedFile, len(paths))
	var todo []int
	seen := make(map[string]bool, len(paths))
	for i, p := range paths {
		seen[p] = true
		st, err := stampOf(p)
		if err != nil {
			out[i] = cachedFile{err: mesh.Errors{{Source: p, Msg: err.Error()}}}
			continue
		}
		if c, ok := l.cache[p]; ok && c.stamp == st {
			out[i] = c
			continue
		}
		out[i].stamp = st
		todo = append(todo, i)
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := mesh.LoadFile(paths[i])
				out[i].res, out[i].err = res, err
			}
		}()
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	l.decodes += len(todo)
	for _, i := range todo {
		l.cache[paths[i]] = out[i]
	}
	for p := range l.cache {
		if !seen[p] {
			delete(l.cache, p)
		}
	}
	return out
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

// resourceFiles lists the files mesh.LoadDir would read, in the same (lexical) order,
// minus ".."-prefixed entries.
func resourceFiles(dir string) ([]string, mesh.Errors) {
	var paths []string
	var errs mesh.Errors
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, &mesh.FieldError{Source: path, Msg: err.Error()})
			return nil
		}
		if path != dir && strings.HasPrefix(d.Name(), "..") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, &mesh.FieldError{Source: dir, Msg: err.Error()})
	}
	return paths, errs
}

func appendErrors(errs mesh.Errors, err error) mesh.Errors {
	if err == nil {
		return errs
	}
	var es mesh.Errors
	if errors.As(err, &es) {
		return append(errs, es...)
	}
	var fe *mesh.FieldError
	if errors.As(err, &fe) {
		return append(errs, fe)
	}
	return append(errs, &mesh.FieldError{Msg: err.Error()})
}
