package tproxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The helper process stands in for the agent inside the test namespace: the resolver on the
// DNS redirect port and Envoy's outbound and inbound listeners, each reporting the original
// destination (SO_ORIGINAL_DST) of what it accepted. It binds port 0 (IPv4 and IPv6 on the
// same port), drops to the agent's UID like the real agent, prints its ports and serves until
// its stdin closes. The parent runs it with `ip netns exec NS <test binary>` (docs/dns.md,
// embedding pitfall 9: the whole process lives in the namespace).
const helperEnv = "KUMA_DP_TPROXY_TEST_HELPER_UID"

// Where Docker's embedded resolver listens behind its DNAT, and what it answers.
var (
	dockerDNS    = netip.MustParseAddrPort("127.0.0.11:40000")
	dockerAnswer = netip.MustParseAddr("192.0.2.11")
)

// The VIPs the test resolver answers with.
var (
	testVIP4 = netip.MustParseAddr("240.0.0.1")
	testVIP6 = netip.MustParseAddr("fd00:fd00::1")
)

func TestTproxyHelperProcess(t *testing.T) {
	uidStr := os.Getenv(helperEnv)
	if uidStr == "" {
		t.Skip("helper process for the netns tests; runs only when re-executed by them")
	}
	uid, err := strconv.Atoi(uidStr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	if err := runHelper(uid); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func runHelper(uid int) error {
	// Run as the agent's user (all threads, Go >= 1.16) before opening any socket: the
	// owner match (and so the conntrack zone split) sees the socket's creator, not the
	// process's current user.
	if err := syscall.Setgid(uid); err != nil {
		return err
	}
	if err := syscall.Setuid(uid); err != nil {
		return err
	}
	dnsPort, dnsServers, err := listenDNS()
	if err != nil {
		return err
	}
	outPort, outLns, err := listenTCPBoth()
	if err != nil {
		return err
	}
	inPort, inLns, err := listenTCPBoth()
	if err != nil {
		return err
	}
	// A local service on the loopback network, like systemd-resolved on 127.0.0.53.
	local, err := net.Listen("tcp4", "127.0.0.53:0")
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := local.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, "local")
			_ = c.Close()
		}
	}()
	// Docker's embedded resolver: the netns test's foreign rules DNAT 127.0.0.11:53 to it
	// and SNAT its answers back to port 53.
	docker, err := net.ListenPacket("udp4", dockerDNS.String())
	if err != nil {
		return err
	}
	dnsServers = append(dnsServers, &dns.Server{PacketConn: docker, Handler: answerer(dockerAnswer, netip.MustParseAddr("2001:db8::11"))})
	for _, s := range dnsServers {
		go func() { _ = s.ActivateAndServe() }()
	}
	for _, ln := range outLns {
		go serveOrigDst(ln, "orig=")
	}
	for _, ln := range inLns {
		go serveOrigDst(ln, "inbound orig=")
	}
	fmt.Printf("ready %d %d %d %d\n", dnsPort, outPort, inPort, local.Addr().(*net.TCPAddr).Port)
	// Serve until the parent closes our stdin.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// listenTCPBoth listens on 0.0.0.0:0 and on [::] with the same port.
func listenTCPBoth() (int, []net.Listener, error) {
	l4, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return 0, nil, err
	}
	port := l4.Addr().(*net.TCPAddr).Port
	l6, err := net.Listen("tcp6", fmt.Sprintf("[::]:%d", port))
	if err != nil {
		return 0, nil, err
	}
	return port, []net.Listener{l4, l6}, nil
}

func listenDNS() (int, []*dns.Server, error) {
	u4, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		return 0, nil, err
	}
	port := u4.LocalAddr().(*net.UDPAddr).Port
	u6, err := net.ListenPacket("udp6", fmt.Sprintf("[::]:%d", port))
	if err != nil {
		return 0, nil, err
	}
	port, tcp, err := func() (int, []net.Listener, error) {
		t4, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			return 0, nil, err
		}
		t6, err := net.Listen("tcp6", fmt.Sprintf("[::]:%d", port))
		if err != nil {
			return 0, nil, err
		}
		return port, []net.Listener{t4, t6}, nil
	}()
	if err != nil {
		return 0, nil, err
	}
	h := answerer(testVIP4, testVIP6)
	return port, []*dns.Server{
		{PacketConn: u4, Handler: h}, {PacketConn: u6, Handler: h},
		{Listener: tcp[0], Handler: h}, {Listener: tcp[1], Handler: h},
	}, nil
}

// answerer answers httpbin.mesh with the given addresses and NXDOMAIN otherwise.
func answerer(v4, v6 netip.Addr) dns.HandlerFunc {
	return func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) != 1 || q.Question[0].Name != "httpbin.mesh." {
			m.Rcode = dns.RcodeNameError
			_ = w.WriteMsg(m)
			return
		}
		hdr := dns.RR_Header{Name: "httpbin.mesh.", Class: dns.ClassINET, Ttl: 30}
		switch q.Question[0].Qtype {
		case dns.TypeA:
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: v4.AsSlice()})
		case dns.TypeAAAA:
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: v6.AsSlice()})
		}
		_ = w.WriteMsg(m)
	}
}

// serveOrigDst writes prefix + the connection's original destination, then closes it.
func serveOrigDst(ln net.Listener, prefix string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		dst, err := originalDst(c.(*net.TCPConn))
		if err != nil {
			fmt.Fprintf(c, "error %v\n", err)
		} else {
			fmt.Fprintf(c, "%s%s\n", prefix, dst)
		}
		_ = c.Close()
	}
}

// originalDst reads the destination a connection had before REDIRECT: SO_ORIGINAL_DST
// returns a sockaddr_in (read through the IPv6Mreq-sized getter), IP6T_SO_ORIGINAL_DST (same
// number, SOL_IPV6) a sockaddr_in6 (read through the IPv6MTUInfo getter).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local := c.LocalAddr().(*net.TCPAddr)
	var out netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if local.IP.To4() != nil {
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = err
				return
			}
			b := m.Multiaddr // sockaddr_in: family(2) port(2, big endian) addr(4)
			out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			return
		}
		i, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		var pb [2]byte
		binary.NativeEndian.PutUint16(pb[:], i.Addr.Port) // stored in network order
		out = netip.AddrPortFrom(netip.AddrFrom16(i.Addr.Addr), binary.BigEndian.Uint16(pb[:]))
	})
	if err != nil {
		return out, err
	}
	return out, serr
}
