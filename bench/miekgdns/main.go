// Command miekgdns is bench/dns.sh's "bare library" peer: the least a Go DNS server on
// github.com/miekg/dns does to answer A/AAAA from a map - no plugin chain, no metrics.
// Names from the hosts file answer authoritatively; other names in the zone get NXDOMAIN
// and a name without the asked family gets NODATA, both with an SOA.
//
//	miekgdns --hosts data/hosts --addr 127.0.0.1:25312 --zone mesh.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/miekg/dns"
	"github.com/spf13/pflag"
)

type records struct{ a, aaaa []dns.RR }

func main() {
	fs := pflag.NewFlagSet("miekgdns", pflag.ContinueOnError)
	hosts := fs.String("hosts", "", "hosts file (\"ip name\" lines)")
	addr := fs.String("addr", "127.0.0.1:25312", "UDP listen address")
	zone := fs.String("zone", "mesh.", "zone we are authoritative for")
	ttl := fs.Uint32("ttl", 30, "answer TTL")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	table, err := load(*hosts, *ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "miekgdns:", err)
		os.Exit(1)
	}
	apex := dns.Fqdn(strings.ToLower(*zone))
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: apex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: *ttl},
		Ns: "ns." + apex, Mbox: "hostmaster." + apex, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: *ttl}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		q := req.Question[0]
		name := q.Name
		if strings.ContainsFunc(name, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
			name = strings.ToLower(name)
		}
		rs, ok := table[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		case q.Qtype == dns.TypeA && rs.a != nil:
			m.Answer = rs.a
		case q.Qtype == dns.TypeAAAA && rs.aaaa != nil:
			m.Answer = rs.aaaa
		default:
			m.Ns = []dns.RR{soa}
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{Addr: *addr, Net: "udp", Handler: handler}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		srv.Shutdown()
	}()
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "miekgdns:", err)
		os.Exit(1)
	}
}

func load(path string, ttl uint32) (map[string]*records, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	table := map[string]*records{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		ip := net.ParseIP(fields[0])
		if ip == nil {
			return nil, fmt.Errorf("%s: bad address %q", path, fields[0])
		}
		for _, h := range fields[1:] {
			name := dns.Fqdn(strings.ToLower(h))
			rs := table[name]
			if rs == nil {
				rs = &records{}
				table[name] = rs
			}
			if v4 := ip.To4(); v4 != nil {
				rs.a = append(rs.a, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: v4})
			} else {
				rs.aaaa = append(rs.aaaa, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: ip})
			}
		}
	}
	return table, sc.Err()
}
