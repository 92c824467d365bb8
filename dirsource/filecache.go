package dirsource

import (
	"iter"
	"slices"
)

// fileCache is the decode cache held in memory: each file's entry by path. A directory of
// a file per dataplane holds 10,000 entries or more, so they are kept in one slice, with
// no map beside them between loads: a map keyed by path with an entry of ~100 bytes costs
// twice that a file in its buckets (a Go map is often half empty after it grows). The
// index by path is built when a load (or a write of the cache) first looks a file up, and
// dropped once it is done (dropIndex): garbage then, as the load's other work.
type fileCache struct {
	files []fileSlot
	at    map[string]int32 // files' index by path; nil: not built
	// errs is the error of each file refused (few, or none: not a field of every entry).
	errs map[string]error
}

// fileSlot is a file's entry (its error in fileCache.errs). A file that could not be read
// (cachedFile.readFailed) is never cached, so an entry has no such flag. name is the file's
// path, the string its resources' sources name the file with (see ownSources): the entry
// keeps it while the file is cached, across its decodes.
type fileSlot struct {
	name  *string
	stamp fileStamp
	sum   digest
	list  resList
}

func (c *fileCache) file(s *fileSlot) cachedFile {
	return cachedFile{stamp: s.stamp, sum: s.sum, res: s.list.all(), list: s.list, err: c.errs[*s.name]}
}

func (c *fileCache) index() map[string]int32 {
	if c.at == nil {
		c.at = make(map[string]int32, len(c.files))
		for i := range c.files {
			c.at[*c.files[i].name] = int32(i)
		}
	}
	return c.at
}

// kept is the entry of the file at path as the cache keeps it: its resources in list alone
// (res nil), for what does not need them read back (see resList.all).
func (c *fileCache) kept(path string) (cachedFile, bool) {
	i, ok := c.index()[path]
	if !ok {
		return cachedFile{}, false
	}
	s := &c.files[i]
	return cachedFile{stamp: s.stamp, sum: s.sum, list: s.list, err: c.errs[*s.name]}, true
}

// get is the entry of the file at path.
func (c *fileCache) get(path string) (cachedFile, bool) {
	i, ok := c.index()[path]
	if !ok {
		return cachedFile{}, false
	}
	return c.file(&c.files[i]), true
}

// nameFor is the name of the file at path: its entry's, else a new one, for the entry set
// for it next (set).
func (c *fileCache) nameFor(path string) *string {
	if i, ok := c.index()[path]; ok {
		return c.files[i].name
	}
	name := new(string)
	*name = path
	return name
}

// set makes f the entry of the file at path (f.readFailed is false: such a file is never
// cached), and returns the list it keeps of f.res (f.list when it holds them) and the
// entry's name for the file: the one it had, else name (from nameFor; nil: path, the
// string given now).
func (c *fileCache) set(path string, f cachedFile, name *string) (resList, *string) {
	s := fileSlot{stamp: f.stamp, sum: f.sum, list: keep(f.list, f.res)}
	if f.err != nil {
		if c.errs == nil {
			c.errs = map[string]error{}
		}
		c.errs[path] = f.err
	} else {
		delete(c.errs, path)
	}
	idx := c.index()
	if i, ok := idx[path]; ok {
		s.name = c.files[i].name
		c.files[i] = s
		return s.list, s.name
	}
	if s.name = name; name == nil {
		s.name = new(string)
		*s.name = path
	}
	idx[path] = int32(len(c.files))
	c.files = append(c.files, s)
	return s.list, s.name
}

// growFor makes room for the entries of the files at paths[i], i in todo, that have none
// (the files a load decodes, new to the cache), so that the slice is not left up to a
// quarter larger than the files it holds, nor larger at all when the files decoded all
// had entries (a touch of every file).
func (c *fileCache) growFor(paths []string, todo []int) {
	idx := c.index()
	n := 0
	for _, i := range todo {
		if _, ok := idx[paths[i]]; !ok {
			n++
		}
	}
	c.grow(n)
}

// grow makes room for n more entries.
func (c *fileCache) grow(n int) { c.files = slices.Grow(c.files, n) }

// del drops the entry of the file at path, if any.
func (c *fileCache) del(path string) {
	idx := c.index()
	i, ok := idx[path]
	if !ok {
		return
	}
	last := len(c.files) - 1
	if int(i) != last {
		c.files[i] = c.files[last]
		idx[*c.files[i].name] = i
	}
	c.files[last] = fileSlot{}
	c.files = c.files[:last]
	delete(idx, path)
	delete(c.errs, path)
}

// len is how many files have an entry.
func (c *fileCache) len() int { return len(c.files) }

// all gives each file's path and entry, in no particular order.
func (c *fileCache) all() iter.Seq2[string, cachedFile] {
	return func(yield func(string, cachedFile) bool) {
		for i := range c.files {
			if !yield(*c.files[i].name, c.file(&c.files[i])) {
				return
			}
		}
	}
}

// dropIndex drops the index by path (built again when next needed), and the slice's room
// for entries of files gone since, when it is most of it.
func (c *fileCache) dropIndex() {
	c.at = nil
	if len(c.errs) == 0 {
		c.errs = nil // a map emptied keeps its buckets
	}
	if cap(c.files) > 2*len(c.files)+16 {
		c.files = slices.Clip(slices.Clone(c.files))
	}
}
