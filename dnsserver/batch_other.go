//go:build !(linux && (amd64 || arm64))

package dnsserver

import "net"

// batchIO is not available here: one datagram a system call.
type batchIO struct{}

// ReadFrom answers the datagrams the fast path can and returns the others to CoreDNS
// (answerHere), one datagram a system call.
func (c *fastConn) ReadFrom(b []byte) (int, net.Addr, error) { return c.readOne(b) }

// startBatch: no batched reads here.
func (c *fastConn) startBatch() bool { return false }
