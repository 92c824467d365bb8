package dnsserver

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Defaults.
const (
	DefaultPort       = 15053
	DefaultTTL        = 30
	DefaultResolvConf = "/etc/resolv.conf"
)

// Config of the resolver. The zero value is valid: it listens on 127.0.0.1:15053 (and
// [::1]:15053 when the host has IPv6 loopback) and forwards to resolv.conf's nameservers.
type Config struct {
	// Addrs are the listen addresses, host:port with an IP literal host, each served on
	// UDP and TCP. Port 0 picks a free port (the same one for UDP and TCP); read it back
	// with Server.Addrs after Ready.
	Addrs []string
	// TTL of the VIP answers (and of the SOA minimum in NODATA answers), seconds.
	TTL uint32
	// Upstreams receive every query for a name the table does not own: "ip" or "ip:port"
	// ("[v6]:port"). Default: every nameserver of ResolvConf.
	Upstreams []string
	// ResolvConf gives the search domains (and the default upstreams).
	ResolvConf string
	// CorefileTemplate replaces the generated Corefile: a text/template over CorefileData
	// (kumahq/kuma#8119). Every server block must contain "kumavip {{.ID}}".
	CorefileTemplate string
	Logger           *slog.Logger
}

// resolvConf is what we read from resolv.conf.
type resolvConf struct {
	nameservers []string
	search      []string
}

func readResolvConf(path string) (resolvConf, error) {
	var rc resolvConf
	f, err := os.Open(path)
	if err != nil {
		return rc, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			rc.nameservers = append(rc.nameservers, fields[1])
		case "search", "domain": // the last of these lines wins (resolv.conf(5))
			rc.search = rc.search[:0]
			for _, d := range fields[1:] {
				if strings.HasPrefix(d, "#") || strings.HasPrefix(d, ";") {
					break
				}
				if d = strings.Trim(strings.ToLower(d), "."); d != "" {
					rc.search = append(rc.search, d)
				}
			}
		}
	}
	return rc, sc.Err()
}

// normalized is a validated Config with the defaults filled in.
type normalized struct {
	addrs     []netip.AddrPort
	ttl       uint32
	upstreams []string // ip:port
	search    []string
	template  string
	logger    *slog.Logger
}

func normalize(cfg Config) (normalized, error) {
	n := normalized{ttl: cfg.TTL, logger: cfg.Logger, template: cfg.CorefileTemplate}
	if n.logger == nil {
		n.logger = slog.New(slog.DiscardHandler)
	}
	if n.ttl == 0 {
		n.ttl = DefaultTTL
	}
	if n.ttl > math.MaxInt32 { // RFC 2181 8
		return n, fmt.Errorf("dnsserver: ttl %d: must be at most %d", cfg.TTL, math.MaxInt32)
	}
	addrs := cfg.Addrs
	if len(addrs) == 0 {
		addrs = DefaultAddrs(DefaultPort)
	}
	seen := map[netip.AddrPort]bool{}
	for i, a := range addrs {
		ap, err := parseHostPort(a, -1)
		if err != nil {
			return n, fmt.Errorf("dnsserver: addrs[%d] %q: %v", i, a, err)
		}
		if seen[ap] && ap.Port() != 0 {
			return n, fmt.Errorf("dnsserver: addrs[%d] %q: listed twice", i, a)
		}
		seen[ap] = true
		n.addrs = append(n.addrs, ap)
	}

	path := cfg.ResolvConf
	if path == "" {
		path = DefaultResolvConf
	}
	rc, rcErr := readResolvConf(path)
	if rcErr != nil && len(cfg.Upstreams) == 0 {
		return n, fmt.Errorf("dnsserver: resolv_conf %q: %v (and no upstreams given)", path, rcErr)
	}
	if rcErr != nil {
		n.logger.Warn("resolv.conf unreadable: no search domains", "resolv_conf", path, "error", rcErr)
	}
	n.search = rc.search
	ups, field := cfg.Upstreams, "upstreams"
	if len(ups) == 0 {
		ups, field = rc.nameservers, "resolv_conf "+strconv.Quote(path)+" nameserver"
	}
	for i, u := range ups {
		ap, err := parseHostPort(u, 53)
		if err != nil {
			return n, fmt.Errorf("dnsserver: %s[%d] %q: %v", field, i, u, err)
		}
		if seen[ap] { // forwarding to ourselves would loop
			n.logger.Warn("upstream is one of our own listen addresses: skipped", "upstream", u)
			continue
		}
		n.upstreams = append(n.upstreams, ap.String())
	}
	if len(n.upstreams) == 0 {
		return n, fmt.Errorf("dnsserver: upstreams: none usable (given %q, resolv_conf %q nameservers %q)",
			cfg.Upstreams, path, rc.nameservers)
	}
	return n, nil
}

// parseHostPort accepts "ip:port", "[v6]:port" and, when defPort >= 0, a bare "ip" or "v6".
func parseHostPort(s string, defPort int) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if defPort < 0 {
			return netip.AddrPort{}, fmt.Errorf("want host:port with an IP address host")
		}
		host, port = strings.Trim(s, "[]"), strconv.Itoa(defPort)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("host %q is not an IP address", host)
	}
	if ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("host %q: zones are not supported", host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q is not a number in 0-65535", port)
	}
	if p == 0 && defPort >= 0 {
		return netip.AddrPort{}, fmt.Errorf("port 0 is not a valid upstream port")
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

// DefaultAddrs are the addresses the resolver listens on when none are given: 127.0.0.1,
// and ::1 where the host has IPv6 loopback, at port.
func DefaultAddrs(port int) []string {
	addrs := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if hasIPv6Loopback() {
		addrs = append(addrs, net.JoinHostPort("::1", strconv.Itoa(port)))
	}
	return addrs
}

// hasIPv6Loopback reports whether [::1] can be bound here (IPv6 may be disabled in pods).
func hasIPv6Loopback() bool {
	c, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}
