package fanout

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// readSyscalls is the process's read system calls so far (/proc/self/io's syscr).
func readSyscalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Skip("no syscr in /proc/self/io")
	return 0
}

// An agent's connection is read in chunks taken when data is there: 200 small frames that
// arrived together cost a few system calls, not one or two each (gRPC, given no buffer of
// its own, reads a frame's 9-byte header, then its payload); every byte comes out in order,
// nothing is held once read, and the peer's close reads as io.EOF.
func TestConnReadsInChunksAndHoldsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl := newHeardListener(ln)
	defer hl.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := hl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := sc.(*heardConn)
	if c.raw == nil {
		t.Fatal("the accepted connection has no raw connection to wait on")
	}
	var sent bytes.Buffer
	for i := range 200 {
		sent.WriteString("frame-hd:") // 9 bytes, as an HTTP/2 frame header
		sent.WriteString(strconv.Itoa(100000 + i))
		sent.WriteString("xx") // 8 bytes of payload
	}
	if _, err := client.Write(sent.Bytes()); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	before := readSyscalls(t)
	for range 200 {
		for _, size := range []int{9, 8} {
			p := make([]byte, size)
			if _, err := io.ReadFull(c, p); err != nil {
				t.Fatal(err)
			}
			got.Write(p)
		}
	}
	calls := readSyscalls(t) - before
	if !bytes.Equal(got.Bytes(), sent.Bytes()) {
		t.Fatalf("read %q..., want %q...", got.Bytes()[:40], sent.Bytes()[:40])
	}
	t.Logf("400 reads of 200 frames: %d read system calls", calls)
	if calls > 20 {
		t.Errorf("%d read system calls for 200 frames that came together, want a few", calls)
	}
	if c.chunk != nil {
		t.Error("a chunk is still held once every byte was read")
	}
	client.Close()
	if _, err := c.Read(make([]byte, 9)); !errors.Is(err, io.EOF) {
		t.Errorf("after the peer closed: %v, want io.EOF", err)
	}
}
