package testutil

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// FreeDNSPort is a port free for both UDP and TCP on 127.0.0.1, for a server that cannot
// listen on port 0 and report its port back (nsd). Read back whatever can be read back
// instead. The port is below the kernel's ephemeral range (LowPort): a server of the test
// started meanwhile on port 0 is never given it.
func FreeDNSPort(t testing.TB) int {
	t.Helper()
	return LowPort(t, true)
}

// LowPort is a loopback port free now for TCP (and for UDP too when udp), below the
// kernel's ephemeral range: any listener on port 0 - the test's own servers started after
// the port is chosen, other tests' - is given a port from that range, never one below it
// (a port taken from the range itself was once given to a kuma-cp started between the
// choice and nsd's start). The port is reserved for the rest of the test against the other
// test processes of the run (go test runs packages in parallel), which pick from the same
// range. Without a known range it is a port 0 gave, free now.
func LowPort(t testing.TB, udp bool) int {
	t.Helper()
	if low := ephemeralLow(); low > 11024 {
		for range 200 {
			port := low - 10000 + rand.IntN(10000)
			if reserve(t, port) && free(port, udp) {
				return port
			}
		}
	}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if free(port, udp) {
			return port
		}
	}
	t.Fatal("no loopback port free")
	return 0
}

// free reports whether port can be listened on now (TCP, and UDP when udp).
func free(port int, udp bool) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	if udp {
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return false
		}
		pc.Close()
	}
	return true
}

// reserve binds an abstract unix socket named for port, held until the test ends: only
// one process can bind a name, and the kernel frees it when the process dies, so a crashed
// run leaves nothing held and nothing behind. It reports false when another process holds
// it.
func reserve(t testing.TB, port int) bool {
	l, err := net.Listen("unix", "@kuma-dp-test-port-"+strconv.Itoa(port))
	if err != nil {
		return !errors.Is(err, syscall.EADDRINUSE) // no abstract sockets: the listen probe alone
	}
	t.Cleanup(func() { l.Close() })
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (0 when unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
