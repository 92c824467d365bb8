package dirsource

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A fingerprint summarises what a load would read: every path under dir (symlinks followed for
// their target's size and time, so a Kubernetes ConfigMap's "..data" swap shows) and the
// dataplane file. Equal fingerprints mean nothing on disk changed that a load would see,
// short of a same-size rewrite within the file system's time granularity.
//
// A fingerprinter takes them. The source takes one every PollInterval when polling and every 10 x PollInterval beside
// inotify, however large the directory: a fingerprinter reuses its buffers, so that an idle
// agent allocates nothing (os.Stat and os.ReadDir allocate ~300 bytes a file: 6 MB of
// garbage each time for a directory of 20,000 files, which grew an idle agent's heap, and
// its RSS, by half until a GC ran).
type fingerprinter struct {
	mu      sync.Mutex
	h       hash.Hash
	sum     [32]byte
	path    []byte     // the path being stamped, without its NUL
	names   []byte     // the names read of the directories being walked, each followed by a NUL
	spans   []nameSpan // where they are in names; each directory's sorted by name
	dirents []byte     // getdents64's buffer
	num     [8]byte
	st      unix.Stat_t
	took    time.Duration // how long the last take took
	looks   int           // takes so far
}

// pollCPUShare bounds the share of a core the periodic checks take: the next one comes
// after base or after pollCPUShare times as long as the last took, whichever is later (a
// directory of 100,000 files, 141 ms a look by -bench Fingerprint, polled every 500 ms took
// 28% of a core).
const pollCPUShare = 20

// pollEvery is when the next check comes after one that took took (see pollCPUShare).
func pollEvery(base, took time.Duration) time.Duration {
	return max(base, pollCPUShare*took)
}

// The constant parts of a fingerprint, written as they are (a []byte literal handed to the
// hash would be allocated at each call).
var (
	nul        = []byte{0}
	missing    = []byte("missing")
	unreadable = []byte("\x00unreadable")
)

// nameSpan is one directory entry: names[start:end] (a NUL follows), and whether it is a
// directory itself (not a link to one: those are stamped, not walked, as filepath.WalkDir
// does).
type nameSpan struct {
	start, end int
	dir        bool
}

// take returns the fingerprint of the dataplane file and of dir (see fingerprinter).
func (f *fingerprinter) take(dataplaneFile, dir string) [32]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := time.Now()
	if f.h == nil {
		f.h = sha256.New()
		f.dirents = make([]byte, 16<<10)
	}
	f.h.Reset()
	f.path = append(f.path[:0], dataplaneFile...)
	f.stamp()
	if dir != "" {
		f.path = append(f.path[:0], dir...)
		if f.stamp() && f.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			f.walk() // the root is walked when it is a link to a directory too
		}
	}
	f.h.Sum(f.sum[:0])
	f.took = time.Since(start)
	f.looks++
	return f.sum
}

// lastTook is how long the last take took.
func (f *fingerprinter) lastTook() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took
}

// taken is how many takes there were.
func (f *fingerprinter) taken() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.looks
}

// stamp hashes f.path and what stat says of it (links followed), and reports whether stat
// succeeded (f.st then holds its answer).
func (f *fingerprinter) stamp() bool {
	return f.stampAt(unix.AT_FDCWD, f.cpath())
}

// stampAt is stamp of f.path, found as the NUL-terminated path p relative to dirfd.
func (f *fingerprinter) stampAt(dirfd int, p *byte) bool {
	f.h.Write(f.path)
	f.h.Write(nul)
	if !f.stat(dirfd, p, 0) {
		f.h.Write(missing)
		return false
	}
	f.putUint(uint64(f.st.Size))
	f.putUint(uint64(f.st.Mtim.Sec)*1e9 + uint64(f.st.Mtim.Nsec))
	f.putUint(uint64(f.st.Mode))
	return true
}

func (f *fingerprinter) putUint(v uint64) {
	binary.LittleEndian.PutUint64(f.num[:], v)
	f.h.Write(f.num[:])
}

// cpath is f.path NUL-terminated for a system call (the NUL is past its length).
func (f *fingerprinter) cpath() *byte {
	f.path = append(f.path, 0)
	f.path = f.path[:len(f.path)-1]
	return unsafe.SliceData(f.path)
}

// walk stamps every entry of the directory f.path in name order, and walks those that are
// directories. A directory that cannot be read is hashed as unreadable.
func (f *fingerprinter) walk() {
	fd, err := f.openDir(f.cpath())
	if err != nil {
		f.h.Write(unreadable)
		return
	}
	first, firstName := len(f.spans), len(f.names)
	for {
		n, err := unix.Getdents(fd, f.dirents)
		if err != nil {
			f.h.Write(unreadable)
			break
		}
		if n <= 0 {
			break
		}
		for off := 0; off+19 <= n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name (NUL-ended)
			rec := f.dirents[off:n]
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			if reclen < 19 || reclen > len(rec) {
				break
			}
			name := rec[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			s := nameSpan{start: len(f.names), end: len(f.names) + len(name)}
			switch rec[18] {
			case unix.DT_DIR:
				s.dir = true
			case unix.DT_UNKNOWN: // some file systems do not say: ask (the link itself)
				f.names = append(append(f.names, name...), 0)
				s.dir = f.stat(fd, &f.names[s.start], unix.AT_SYMLINK_NOFOLLOW) && f.st.Mode&unix.S_IFMT == unix.S_IFDIR
				f.spans = append(f.spans, s)
				continue
			}
			f.names = append(append(f.names, name...), 0)
			f.spans = append(f.spans, s)
		}
	}
	slices.SortFunc(f.spans[first:], func(a, b nameSpan) int {
		return bytes.Compare(f.names[a.start:a.end], f.names[b.start:b.end])
	})
	dirLen := len(f.path)
	for i := first; i < len(f.spans); i++ {
		s := f.spans[i]
		f.path = append(append(f.path[:dirLen], '/'), f.names[s.start:s.end]...)
		// stat relative to the directory: one lookup, not the whole path's
		if f.stampAt(fd, &f.names[s.start]) && s.dir {
			f.walk()
		}
	}
	unix.Close(fd)
	f.path = f.path[:dirLen]
	f.spans, f.names = f.spans[:first], f.names[:firstName]
}

// stat is fstatat(2) into f.st of the NUL-terminated path at p, without allocating (the
// unix package copies a path it is given as a string).
func (f *fingerprinter) stat(dirfd int, p *byte, flags int) bool {
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&f.st)), uintptr(flags), 0, 0)
	runtime.KeepAlive(f)
	return errno == 0
}

// openDir opens the directory at the NUL-terminated path p for reading its entries.
func (f *fingerprinter) openDir(p *byte) (int, error) {
	dirfd := unix.AT_FDCWD
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC), 0, 0, 0)
	runtime.KeepAlive(f)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
