package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBinaryMappings(t *testing.T) {
	// smaps lists each mapping's fields under it; only "Anonymous:" matters here.
	fields := func(anonKB int) string {
		return fmt.Sprintf("Size:              27068 kB\nRss:                9000 kB\nAnonymous:      %6d kB\nVmFlags: rd mr mw me sd\n", anonKB)
	}
	smaps := "00400000-0114b000 r-xp 00000000 08:01 123 /opt/kuma dp/kuma-dp\n" + fields(0) +
		"0114b000-021e1000 r--p 00d4b000 08:01 123 /opt/kuma dp/kuma-dp\n" + fields(0) +
		// relocated read-only data (a position-independent build): private pages, kept
		"021e1000-021f0000 r--p 01de1000 08:01 123 /opt/kuma dp/kuma-dp\n" + fields(60) +
		"021f0000-0223d000 rw-p 01df0000 08:01 123 /opt/kuma dp/kuma-dp\n" + fields(0) +
		"0223d000-02300000 rw-p 00000000 00:00 0\n" + fields(700) +
		"7f0000000000-7f0000021000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n" + fields(0) +
		"7f1000000000-7f1000001000 r--p 00000000 08:01 123 /opt/kuma dp/kuma-dp (deleted)\n" + fields(0) +
		"7f2000000000-7f2000001000 ---p 00000000 08:01 123 /opt/kuma dp/kuma-dp\n" + fields(0) +
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n" + fields(132) +
		"garbage line\n" +
		// the last mapping, its fields cut short: advised (nothing says it holds a private page)
		"7ffe00000000-7ffe00001000 r--p 00000000 08:01 123 /opt/kuma dp/kuma-dp\n"
	got := binaryMappings([]byte(smaps), "/opt/kuma dp/kuma-dp")
	want := [][2]uint64{{0x400000, 0x114b000}, {0x114b000, 0x21e1000}, {0x7f1000000000, 0x7f1000001000}, {0x7ffe00000000, 0x7ffe00001000}}
	if !slices.Equal(got, want) {
		t.Fatalf("mappings %x, want %x", got, want)
	}
}

// rssFile is the process's resident file-backed memory, from /proc/self/status.
func rssFile(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssFile %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// The test binary's pages, made resident first (as starting kuma-dp makes its own), go
// back with the advice. It runs in a process of its own: the agents other tests start
// release the same pages from their own goroutines, at any moment. And it runs as a user
// that does not own the binary, as the image runs kuma-dp (UID 5678, the binary root's):
// the kernel then declines MADV_PAGEOUT for the file's pages, and unmapping them is what
// lowers the RSS.
func TestReleaseBinaryPagesLowersRSS(t *testing.T) {
	if os.Getenv("KUMA_DP_BINPAGES_ALONE") == "" {
		t.Run("owner", func(t *testing.T) { releaseInChild(t, os.Args[0], nil) })
		t.Run("not the owner", func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("needs root: runs a copy of the test binary, owned by root, as nobody (65534)")
			}
			dir, err := os.MkdirTemp("", "kuma-dp-binpages-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			bin := filepath.Join(dir, "agent.test")
			copyFile(t, os.Args[0], bin)
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			releaseInChild(t, bin, &syscall.Credential{Uid: 65534, Gid: 65534})
		})
		return
	}
	// MADV_POPULATE_READ (Linux 5.14) maps every page of the mappings, as reading them would.
	if _, err := adviseBinaryPages(unix.MADV_POPULATE_READ); err != nil || pageoutUnsupported.Load() {
		pageoutUnsupported.Store(false)
		t.Skipf("cannot make the binary's pages resident on this kernel (MADV_POPULATE_READ: %v)", err)
	}
	before := rssFile(t)
	advised, err := releaseBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	if pageoutUnsupported.Load() {
		t.Skip("this kernel refuses MADV_PAGEOUT (before Linux 5.4)")
	}
	after := rssFile(t)
	t.Logf("RssFile %d KiB -> %d KiB (%d KiB of mappings advised)", before>>10, after>>10, advised>>10)
	if advised == 0 {
		t.Fatal("no mapping of the test binary was advised")
	}
	if after >= before || before-after < 2<<20 {
		t.Fatalf("RssFile went from %d KiB to %d KiB: want at least 2 MiB less", before>>10, after>>10)
	}
}

// releaseInChild runs TestReleaseBinaryPagesLowersRSS's own part in a process of its own:
// test binary bin, as cred (nil: as this process).
func releaseInChild(t *testing.T, bin string, cred *syscall.Credential) {
	cmd := exec.Command(bin, "-test.run", "^TestReleaseBinaryPagesLowersRSS$", "-test.v")
	cmd.Env = append(os.Environ(), "KUMA_DP_BINPAGES_ALONE=1")
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	t.Logf("in a process of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the test failed in its own process: %v", err)
	}
}

// copyFile copies executable src to dst, then drops dst's pages from the page cache: a file
// just written in one piece is cached in folios of up to 2 MiB, each mapped whole at the
// first touch, which is not how an installed binary is read.
func copyFile(t *testing.T, src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(out.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
