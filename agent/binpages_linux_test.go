package agent

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBinaryMappings(t *testing.T) {
	maps := `00400000-0114b000 r-xp 00000000 08:01 123 /opt/kuma dp/kuma-dp
0114b000-021e1000 r--p 00d4b000 08:01 123 /opt/kuma dp/kuma-dp
021e1000-0223d000 rw-p 01de1000 08:01 123 /opt/kuma dp/kuma-dp
0223d000-02300000 rw-p 00000000 00:00 0
7f0000000000-7f0000021000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000000000-7f1000001000 r--p 00000000 08:01 123 /opt/kuma dp/kuma-dp (deleted)
7f2000000000-7f2000001000 ---p 00000000 08:01 123 /opt/kuma dp/kuma-dp
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
garbage line
`
	got := binaryMappings([]byte(maps), "/opt/kuma dp/kuma-dp")
	want := [][2]uint64{{0x400000, 0x114b000}, {0x114b000, 0x21e1000}, {0x7f1000000000, 0x7f1000001000}}
	if len(got) != len(want) {
		t.Fatalf("mappings %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("mapping %d: %x, want %x", i, got[i], want[i])
		}
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
// release the same pages from their own goroutines, at any moment.
func TestReleaseBinaryPagesLowersRSS(t *testing.T) {
	if os.Getenv("KUMA_DP_BINPAGES_ALONE") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReleaseBinaryPagesLowersRSS$", "-test.v")
		cmd.Env = append(os.Environ(), "KUMA_DP_BINPAGES_ALONE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("the test failed in its own process: %v", err)
		}
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
