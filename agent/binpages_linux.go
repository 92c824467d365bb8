package agent

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The pages of the kuma-dp binary. Starting up runs the initialisation of every package
// linked in (Envoy's protobuf descriptors, CoreDNS, gRPC...), and the kernel maps each page
// it touches, 64 KiB at a time: 20-24 MiB of the binary stay in the process's RSS for
// good although serving DNS and xDS needs 3-5 MiB of it. After each model is applied the
// agent advises the kernel that its read-only binary pages may go:
//
//   - MADV_PAGEOUT (Linux 5.4 and later) reclaims the pages no other process maps (clean
//     copies of the file: nothing is written to swap). The kernel takes this advice for a
//     file's pages only from a process that owns the file or may write it (Linux 6.4 and
//     later, and stable kernels since): an agent running as a user of its own (the image's
//     UID 5678) under a binary owned by root gets nothing from it.
//   - MADV_DONTNEED then unmaps what is left: the pages stay in the page cache, shared with
//     any other process running the binary, and come back at their next use without
//     reading the disk. Any user may give this advice on its own mappings.
//
// Only mappings holding no private copy of a page are advised (the relocated read-only
// data of a position-independent build is one: unmapping it would bring back the file's
// unrelocated bytes); writable data, the heap and stacks are never touched, nor a binary
// kept in tmpfs (whose pages are memory themselves). Before the first load the pages are
// only unmapped, so the loader's code comes back from the page cache.

// binaryInMemory is set when the binary is in tmpfs: nothing is advised then.
var binaryInMemory atomic.Bool

// pageoutUnsupported is set when the kernel refused MADV_PAGEOUT once (before Linux 5.4).
var pageoutUnsupported atomic.Bool

// releaseBinaryPages advises the kernel to reclaim the read-only mappings of the running
// executable, then unmaps what it did not reclaim, and reports how many bytes of mappings
// it advised.
func releaseBinaryPages() (advised uint64, err error) {
	return adviseBinaryPages(unix.MADV_PAGEOUT, unix.MADV_DONTNEED)
}

// unmapBinaryPages unmaps the read-only mappings of the running executable (their pages
// stay in the page cache).
func unmapBinaryPages() (advised uint64, err error) {
	return adviseBinaryPages(unix.MADV_DONTNEED)
}

// adviseBinaryPages gives each advice in turn on the read-only mappings of the running
// executable that hold no private page (found once for all). MADV_PAGEOUT is skipped once
// the kernel refused it.
func adviseBinaryPages(advices ...int) (advised uint64, err error) {
	if binaryInMemory.Load() {
		return 0, nil
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	var fs unix.Statfs_t
	if unix.Statfs("/proc/self/exe", &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		binaryInMemory.Store(true)
		return 0, nil
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	for _, r := range binaryMappings(smaps, exe) {
		for _, advice := range advices {
			if advice == unix.MADV_PAGEOUT && pageoutUnsupported.Load() {
				continue
			}
			_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(r[0]), uintptr(r[1]-r[0]), uintptr(advice))
			switch {
			case errno == unix.EINVAL && advice == unix.MADV_PAGEOUT:
				pageoutUnsupported.Store(true) // before Linux 5.4
			case errno != 0:
				return advised, errno
			}
		}
		advised += r[1] - r[0]
	}
	return advised, nil
}

// binaryMappings returns the [start, end) ranges of the read-only mappings of file exe
// that hold no private (anonymous) page, from a /proc/<pid>/smaps text (a replaced binary
// shows as "exe (deleted)").
func binaryMappings(smaps []byte, exe string) [][2]uint64 {
	var out [][2]uint64
	var cur [2]uint64
	in := false // cur is a read-only mapping of exe, not yet known to hold a private page
	flush := func() {
		if in {
			out = append(out, cur)
		}
		in = false
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			if in && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) != "0" {
				in = false
			}
			continue
		}
		// A mapping's first line: address perms offset dev inode path. Its fields' lines
		// ("Rss: 4 kB") have a key ending in ':' first.
		f := strings.Fields(line)
		if len(f) < 5 || strings.HasSuffix(f[0], ":") {
			continue
		}
		flush()
		if len(f) < 6 || len(f[1]) < 4 || f[1][0] != 'r' || f[1][1] != '-' {
			continue
		}
		path := strings.Join(f[5:], " ")
		if path != exe && path != exe+" (deleted)" {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err := errors.Join(err1, err2); err != nil || b <= a {
			continue
		}
		cur, in = [2]uint64{a, b}, true
	}
	flush()
	return out
}
