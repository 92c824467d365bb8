package dirsource

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is every event that can change what a load reads. IN_MODIFY and IN_CLOSE_WRITE
// both fire for one write; the debounce folds them into one load.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// inotify watches a set of directories through one non-blocking inotify descriptor wrapped
// in an *os.File, so that reads park in the runtime poller and Close wakes them.
type inotify struct {
	f  *os.File
	fd int

	mu   sync.Mutex       // add runs in the source's loop, read in the reader goroutine
	dirs map[int32]string // watch descriptor -> directory
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, dirs: map[int32]string{}}, nil
}

// add watches dir. Adding a directory already watched returns its existing descriptor.
func (w *inotify) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

// addTree watches root and every directory below it. Directories created since the last
// call are picked up, which is why the source calls it before each load.
func (w *inotify) addTree(root string) error {
	if err := w.add(root); err != nil {
		return err
	}
	walk := walkRoot(root)
	return filepath.WalkDir(walk, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == walk || !d.IsDir() {
			return nil
		}
		if err := w.add(path); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	})
}

// event is one decoded inotify event: the directory it happened in and the entry's name.
type event struct {
	dir  string
	name string
	mask uint32
}

// read blocks until events arrive (or Close) and decodes them.
func (w *inotify) read(buf []byte) ([]event, error) {
	n, err := w.f.Read(buf)
	if err != nil {
		return nil, err
	}
	var out []event
	w.mu.Lock()
	defer w.mu.Unlock()
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameStart := off + unix.SizeofInotifyEvent
		nameEnd := nameStart + int(raw.Len)
		if nameEnd > n {
			break
		}
		name := strings.TrimRight(string(buf[nameStart:nameEnd]), "\x00")
		ev := event{dir: w.dirs[raw.Wd], name: name, mask: raw.Mask}
		if raw.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, raw.Wd)
		}
		out = append(out, ev)
		off = nameEnd
	}
	return out, nil
}

func (w *inotify) Close() error { return w.f.Close() }

// walkRoot is dir as filepath.WalkDir must be given it to descend into it when dir itself is
// a symbolic link to a directory (WalkDir does not follow links, not even the root's): with
// a trailing separator the root resolves to the directory, and the paths below it are the
// same as dir's.
func walkRoot(dir string) string {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return dir + string(filepath.Separator)
	}
	return dir
}
