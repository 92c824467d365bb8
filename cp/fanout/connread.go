package fanout

import (
	"io"
	"os"
	"sync"
	"syscall"
)

// An agent's connection is read without a buffer held while it is silent, and without a
// system call per HTTP/2 frame: a small read (gRPC's frame header, an ACK) waits until the
// socket has data without any buffer, then takes what the socket holds, up to readChunk, into
// a pooled chunk that the following reads are served from and that goes back to the pool
// once they have taken it. A read of readChunk or more (a large frame) goes to the
// connection as it is. gRPC is given no read buffer of its own (its buffer, behind a
// listener of ours, was held by every connection: 8 KiB an idle agent).

// readChunk is the most a small read takes from the socket at once.
const readChunk = 8 << 10

var readChunks = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

func (c *heardConn) Read(p []byte) (int, error) {
	if c.r == c.w {
		if c.readErr != nil {
			err := c.readErr
			c.readErr = nil
			return 0, err
		}
		if c.raw == nil || len(p) >= readChunk {
			n, err := c.Conn.Read(p)
			c.heardNow(n)
			return n, err
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.chunk)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		readChunks.Put(c.chunk)
		c.chunk, c.r, c.w = nil, 0, 0
	}
	return n, nil
}

// fill waits until the socket has data, holding no buffer, then reads what it has into a
// chunk. An error comes back only when nothing was read (else the next read returns it).
func (c *heardConn) fill() error {
	var n int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		c.chunk = readChunks.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *c.chunk)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			readChunks.Put(c.chunk)
			c.chunk = nil
			return false // wait until readable
		}
		return true
	})
	if err == nil && rerr != nil {
		err = os.NewSyscallError("read", rerr)
	}
	if n > 0 {
		c.heardNow(n)
		c.r, c.w, c.readErr = 0, n, err
		return nil
	}
	if c.chunk != nil {
		readChunks.Put(c.chunk)
		c.chunk = nil
	}
	if err == nil {
		err = io.EOF // a read of 0 bytes: the peer closed the connection
	}
	return err
}

func (c *heardConn) heardNow(n int) {
	if n > 0 {
		c.heard.Store(sinceEpoch())
	}
}
