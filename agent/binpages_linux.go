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
// agent advises the kernel (madvise MADV_PAGEOUT, Linux 5.4 and later) that its
// read-only binary pages may be reclaimed now: pages no other process maps are dropped
// (they are clean copies of the file: nothing is written to swap), and those the agent
// still uses come back from the file at their next use. Writable data, the heap and
// stacks are not touched, nor a binary kept in tmpfs. Before 5.4 the kernel refuses the
// advice and nothing changes. Before the first load the pages are only unmapped
// (MADV_DONTNEED: the file's pages stay cached, so the loader's code comes back without
// reading the disk), so that what starting up touched does not add to the peak while a
// large model loads.

// pageoutUnsupported is set when the kernel refused MADV_PAGEOUT once.
var pageoutUnsupported atomic.Bool

// releaseBinaryPages advises the kernel to reclaim the read-only mappings of the running
// executable, and reports how many bytes of them it advised.
func releaseBinaryPages() (advised uint64, err error) {
	return adviseBinaryPages(unix.MADV_PAGEOUT)
}

// unmapBinaryPages unmaps the read-only mappings of the running executable (their pages
// stay in the page cache).
func unmapBinaryPages() (advised uint64, err error) {
	return adviseBinaryPages(unix.MADV_DONTNEED)
}

// adviseBinaryPages gives advice on the read-only mappings of the running executable.
func adviseBinaryPages(advice int) (advised uint64, err error) {
	if pageoutUnsupported.Load() {
		return 0, nil
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	var fs unix.Statfs_t
	if unix.Statfs("/proc/self/exe", &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		// A binary in tmpfs is memory itself: reclaiming its pages would mean swapping.
		pageoutUnsupported.Store(true)
		return 0, nil
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	for _, r := range binaryMappings(maps, exe) {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(r[0]), uintptr(r[1]-r[0]), uintptr(advice))
		switch {
		case errno == unix.EINVAL:
			pageoutUnsupported.Store(true)
			return advised, nil
		case errno != 0:
			return advised, errno
		}
		advised += r[1] - r[0]
	}
	return advised, nil
}

// binaryMappings returns the [start, end) ranges of the read-only mappings of file exe in
// a /proc/<pid>/maps text (a replaced binary shows as "exe (deleted)").
func binaryMappings(maps []byte, exe string) [][2]uint64 {
	var out [][2]uint64
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// address perms offset dev inode path
		f := strings.Fields(sc.Text())
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
		out = append(out, [2]uint64{a, b})
	}
	return out
}
