// Command vipdns serves a VIP table from a hosts file with kuma-dp's resolver (package
// dnsserver), for bench/dns.sh. It can also write the benchmark data (--gen).
//
//	vipdns --gen 100000 --out /tmp/bench/data        # hosts + dnsperf queries
//	vipdns --hosts /tmp/bench/data/hosts --addr 127.0.0.1:25310 [--swap-every 500ms]
package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/dnsserver"
	"github.com/kumadp/kuma-dp/vipalloc"
)

func main() {
	fs := pflag.NewFlagSet("vipdns", pflag.ContinueOnError)
	hosts := fs.String("hosts", "", "hosts file to serve (\"ip name\" lines)")
	addr := fs.String("addr", "127.0.0.1:25310", "listen address (UDP and TCP)")
	upstream := fs.String("upstream", "127.0.0.1:9", "upstream for names not in the table")
	swapEvery := fs.Duration("swap-every", 0, "swap between two tables (VIPs shifted) this often")
	gen := fs.Int("gen", 0, "write N names of benchmark data to --out and exit")
	out := fs.String("out", "data", "output directory for --gen")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *gen > 0 {
		if err := generate(*gen, *out); err != nil {
			fmt.Fprintln(os.Stderr, "vipdns:", err)
			os.Exit(1)
		}
		return
	}
	if err := serve(*hosts, *addr, *upstream, *swapEvery); err != nil {
		fmt.Fprintln(os.Stderr, "vipdns:", err)
		os.Exit(1)
	}
}

func serve(hostsFile, addr, upstream string, swapEvery time.Duration) error {
	tables, err := readHosts(hostsFile)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := dnsserver.New(dnsserver.Config{Addrs: []string{addr}, Upstreams: []string{upstream},
		ResolvConf: "/nonexistent", Logger: log})
	if err != nil {
		return err
	}
	s.Swap(tables[0])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var swaps []time.Duration
	var wg sync.WaitGroup
	if swapEvery > 0 {
		wg.Go(func() {
			tick := time.NewTicker(swapEvery)
			defer tick.Stop()
			for i := 1; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					start := time.Now()
					s.Swap(tables[i%2])
					swaps = append(swaps, time.Since(start))
				}
			}
		})
	}
	err = s.Run(ctx)
	stop()
	wg.Wait()
	if len(swaps) > 0 {
		slices.Sort(swaps)
		fmt.Fprintf(os.Stderr, "swaps: %d of %d names, median %s, max %s\n",
			len(swaps), tables[0].Len(), swaps[len(swaps)/2], swaps[len(swaps)-1])
	}
	return err
}

// readHosts builds the table from the hosts file, and a twin whose IPv4 VIPs are moved
// to the next /8 (a real change for --swap-every).
func readHosts(path string) ([2]*vipalloc.Table, error) {
	var tables [2]*vipalloc.Table
	f, err := os.Open(path)
	if err != nil {
		return tables, err
	}
	defer f.Close()
	byName := map[string]*vipalloc.EntryData{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil {
			return tables, fmt.Errorf("%s: %v", path, err)
		}
		for _, h := range fields[1:] {
			h = strings.TrimSuffix(strings.ToLower(h), ".")
			e := byName[h]
			if e == nil {
				e = &vipalloc.EntryData{Hostname: h, Status: vipalloc.Available, Key: h, Ports: []uint32{80}}
				byName[h] = e
				order = append(order, h)
			}
			if ip.Is4() {
				e.IPv4 = ip
			} else {
				e.IPv6 = ip
			}
		}
	}
	if err := sc.Err(); err != nil {
		return tables, err
	}
	a := make([]*vipalloc.Entry, 0, len(order))
	b := make([]*vipalloc.Entry, 0, len(order))
	for _, h := range order {
		e := byName[h]
		a = append(a, vipalloc.NewEntry(*e))
		twin := *e
		if e.IPv4.IsValid() {
			v := e.IPv4.As4()
			v[0]++
			twin.IPv4 = netip.AddrFrom4(v)
		}
		b = append(b, vipalloc.NewEntry(twin))
	}
	tables[0], tables[1] = vipalloc.NewTable(a, nil), vipalloc.NewTable(b, nil)
	return tables, nil
}

// generate writes hosts (svc-<i>.mesh, 240.0.0.0/4 and fd00:fd01::/64 VIPs) and
// queries.txt for dnsperf: names that exist only, 7:2 A:AAAA.
func generate(n int, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var hosts, queries strings.Builder
	for i := range n {
		x := uint32(0xF0000000) + uint32(i) + 1
		fmt.Fprintf(&hosts, "%d.%d.%d.%d svc-%d.mesh\n", x>>24, x>>16&0xff, x>>8&0xff, x&0xff, i)
		fmt.Fprintf(&hosts, "fd00:fd01::%x:%x svc-%d.mesh\n", (i+1)>>16, (i+1)&0xffff, i)
	}
	r := rand.New(rand.NewPCG(1, uint64(n)))
	for range 500_000 {
		t := "A"
		if r.IntN(9) >= 7 {
			t = "AAAA"
		}
		fmt.Fprintf(&queries, "svc-%d.mesh %s\n", r.IntN(n), t)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "queries.txt"), []byte(queries.String()), 0o644)
}
