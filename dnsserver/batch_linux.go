//go:build linux && (amd64 || arm64)

package dnsserver

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchSize is how many datagrams one read (recvmmsg) and one write (sendmmsg) move at most:
// under load several queries wait in the socket, and each system call costs about as much
// as answering one query. The buffers are taken at the first read: batchSize x
// (maxUDPQuery + an answer) ~ 80 KiB a UDP socket, nothing while the agent answers nothing.
const batchSize = 16

// mmsghdr is the kernel's struct mmsghdr on 64-bit Linux.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// batchIO is what ReadFrom reads into and writes from, made once: no allocation a datagram.
type batchIO struct {
	rc      syscall.RawConn
	in      [batchSize][maxUDPQuery]byte
	names   [batchSize]unix.RawSockaddrInet6 // a peer's address, as read and written back
	iov     [batchSize]unix.Iovec
	hdrs    [batchSize]mmsghdr
	out     [batchSize][]byte
	outIov  [batchSize]unix.Iovec
	outHdrs [batchSize]mmsghdr
	fwd     [batchSize][]byte // the datagrams for CoreDNS, each the part of in to hand over
	pending []int             // indexes of fwd left to return, in order
	// recvFn and sendFn are recv and send bound once: a closure given to the RawConn at each
	// call would be allocated at each call. n, errno and the range to send are theirs.
	recvFn, sendFn   func(fd uintptr) bool
	n                int
	errno            syscall.Errno
	sendFrom, sendTo int
}

// ReadFrom reads the datagrams waiting (up to batchSize, one system call), answers those
// the fast path can (answerHere) and writes their answers together (one system call), and
// returns the others to CoreDNS one a call, in order.
func (c *fastConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.b == nil && !c.startBatch() {
		return c.readOne(b)
	}
	bt := c.b
	for {
		if len(bt.pending) > 0 {
			i := bt.pending[0]
			bt.pending = bt.pending[1:]
			return copy(b, bt.fwd[i]), net.UDPAddrFromAddrPort(bt.peer(i)), nil
		}
		n, err := bt.read()
		if err != nil {
			return 0, nil, err
		}
		k := 0
		for i := range n {
			resp, answered, fwd := c.answerHere(bt.in[i][:bt.hdrs[i].n], bt.out[i][:0], len(b))
			bt.out[i] = resp[:0]
			if !answered {
				bt.fwd[i] = fwd
				bt.pending = append(bt.pending, i)
				continue
			}
			bt.queue(k, i, resp)
			k++
		}
		bt.write(k)
	}
}

// startBatch takes the buffers of batched reads; false when the socket gives no raw access.
func (c *fastConn) startBatch() bool {
	rc, err := c.UDPConn.SyscallConn()
	if err != nil {
		return false
	}
	c.b = &batchIO{rc: rc, pending: make([]int, 0, batchSize)}
	c.b.recvFn, c.b.sendFn = c.b.recv, c.b.send
	for i := range c.b.out {
		c.b.out[i] = make([]byte, 0, 1024)
	}
	return true
}

// read reads up to batchSize datagrams, waiting for the first.
func (bt *batchIO) read() (int, error) {
	for i := range bt.hdrs {
		bt.iov[i].Base = &bt.in[i][0]
		bt.iov[i].SetLen(maxUDPQuery)
		h := &bt.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&bt.names[i]))
		h.Namelen = uint32(unsafe.Sizeof(bt.names[i]))
		h.Iov = &bt.iov[i]
		h.SetIovlen(1)
		h.Control, h.Controllen, h.Flags = nil, 0, 0
	}
	for {
		err := bt.rc.Read(bt.recvFn)
		switch {
		case err != nil:
			return 0, err // closed
		case bt.errno == unix.EINTR:
			continue
		case bt.errno != 0:
			return 0, &net.OpError{Op: "read", Net: "udp", Err: bt.errno}
		}
		return bt.n, nil
	}
}

// recv is one recvmmsg; false when nothing waits (the RawConn then waits until readable).
func (bt *batchIO) recv(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&bt.hdrs[0])), batchSize, unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		return false
	}
	bt.n, bt.errno = int(r), e
	return true
}

// send is one sendmmsg of the answers queued from sendFrom to sendTo.
func (bt *batchIO) send(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&bt.outHdrs[bt.sendFrom])), uintptr(bt.sendTo-bt.sendFrom), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		return false
	}
	bt.n, bt.errno = int(r), e
	return true
}

// queue makes the answer resp to datagram i the k-th to write.
func (bt *batchIO) queue(k, i int, resp []byte) {
	bt.outIov[k].Base = unsafe.SliceData(resp)
	bt.outIov[k].SetLen(len(resp))
	h := &bt.outHdrs[k].hdr
	h.Name = (*byte)(unsafe.Pointer(&bt.names[i]))
	h.Namelen = bt.hdrs[i].hdr.Namelen
	h.Iov = &bt.outIov[k]
	h.SetIovlen(1)
	h.Control, h.Controllen, h.Flags = nil, 0, 0
}

// write writes the k answers queued. UDP: an answer not sent is retried by the client (a
// datagram the kernel refuses is skipped, as a failed WriteTo was).
func (bt *batchIO) write(k int) {
	for bt.sendFrom, bt.sendTo = 0, k; bt.sendFrom < k; {
		err := bt.rc.Write(bt.sendFn)
		switch {
		case err != nil:
			return // closed
		case bt.errno == unix.EINTR:
			continue
		case bt.errno != 0 || bt.n <= 0:
			bt.sendFrom++ // the first one failed: skip it
		default:
			bt.sendFrom += bt.n
		}
	}
}

// peer is the address datagram i came from.
func (bt *batchIO) peer(i int) netip.AddrPort {
	sa := &bt.names[i]
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	}
	a := netip.AddrFrom16(sa.Addr)
	if sa.Scope_id != 0 {
		a = a.WithZone(zoneName(sa.Scope_id))
	}
	return netip.AddrPortFrom(a, port)
}

// zoneName is an interface index as a zone (its name when known).
func zoneName(idx uint32) string {
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		return ifi.Name
	}
	return strconv.FormatUint(uint64(idx), 10)
}
