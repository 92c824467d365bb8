package testutil

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// NXDomainUpstream runs a resolver on loopback UDP (a kernel-chosen port) that answers
// NXDOMAIN to everything, standing in for the host's resolvers so that names an agent does
// not own get a real answer. It returns the address; the server stops when t ends.
func NXDomainUpstream(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeNameError)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}
