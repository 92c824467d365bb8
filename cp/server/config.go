// Package server is what `kuma-cp serve` runs, assembled from the control plane's parts: the
// agents' server (cp/fanout) behind its connection limits (cp/connlimit), fed by a watched
// directory (cp/dirstore) or by etcd (cp/store: presence, leader election, the store's
// health), with the write API and the GUI (cp/api, cp/gui), the leader's route scheduler
// and routers' status (cp/routesched, cp/routerstatus), the router shards' DNS
// (cp/shardzones, authdns) and the diagnostics endpoint (cp/diag). Config is serve's
// settings, checked by Check; Serve runs them until SIGINT or SIGTERM. The flags are
// cmd/kuma-cp's.
package server

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/cli"
	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/routing"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// Config is serve's settings; errors name the flag of each (cmd/kuma-cp binds them).
type Config struct {
	ResourcesDir                                       string // --resources-dir (--store dir)
	Address                                            string // the agents' server
	CertFile, KeyFile, TokenKeyFile, ReadyFile         string
	MetricsAddress                                     string // the diagnostics endpoint ("" off)
	MetricsPprof                                       bool
	Metrics                                            connlimit.HTTPConfig // the diagnostics port's limits and timeouts
	Store                                              StoreConfig
	Poll, HandshakeTimeout, MaxConnAge, AgentKeepalive time.Duration
	MaxConns, MaxConnsPerIP                            int
	SkipValidation                                     bool
}

// StoreConfig is where resources live (--store dir or etcd) and what the store brings:
// the API, leader election, route scheduling and the shards' DNS.
type StoreConfig struct {
	Kind                                  string // dir or etcd
	Etcd                                  cli.Etcd
	APIAddress, AdminTokenFile, ReplicaID string
	APIHTTP                               connlimit.HTTPConfig // the API port's limits
	LeaseTTL                              time.Duration
	DNS                                   DNSConfig
	RouteStrategy                         string
}

// DNSConfig is the authoritative DNS for router shards (--dns-address; --store etcd) and the
// zones' settings, which kuma-cp zones takes too.
type DNSConfig struct {
	Address, NotifyKey                  string
	UserZones, Nameservers, Secondaries []string
	TransferFrom                        []string
	TSIG                                map[string]string
}

// Check refuses values that cannot work (usage errors: serve exits 2), naming the flag.
func (c Config) Check() error {
	if err := c.Store.APIHTTP.Check("--api-"); err != nil {
		return err
	}
	if err := c.Metrics.Check("--metrics-"); err != nil {
		return err
	}
	if c.MaxConns < 0 || c.MaxConnsPerIP < 0 {
		return fmt.Errorf("--max-connections %d, --max-connections-per-ip %d: want 0 or more", c.MaxConns, c.MaxConnsPerIP)
	}
	if c.Store.Kind != "dir" {
		return c.Store.Check()
	}
	if c.ResourcesDir == "" {
		return errors.New("--resources-dir is required")
	}
	if fi, err := os.Stat(c.ResourcesDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--resources-dir %q: not a readable directory", c.ResourcesDir)
	}
	return nil
}

// Check refuses store settings that cannot work; the store is etcd past its first case.
func (c *StoreConfig) Check() error {
	switch {
	case c.Kind != "etcd":
		return fmt.Errorf("--store %q: want dir or etcd", c.Kind)
	case c.Etcd.Endpoints == "":
		return errors.New("--store etcd needs --etcd-endpoints")
	case c.AdminTokenFile == "":
		return errors.New("--store etcd needs --admin-token-file (writes through the API are guarded by it)")
	case c.ReplicaID == "" || strings.ContainsFunc(c.ReplicaID, func(r rune) bool { return r == '/' || r == ',' || unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		// inspect's REPLICAS names it as given: a presence key holds no '/', a comma joins them
		return fmt.Errorf("--replica-id %q: want a name without '/', ',' or whitespace", c.ReplicaID)
	case cpstore.ValidPrefix(c.Etcd.Prefix) != nil:
		return fmt.Errorf("--etcd-prefix %q: %w", c.Etcd.Prefix, cpstore.ValidPrefix(c.Etcd.Prefix))
	case routing.Strategies[c.RouteStrategy] == nil:
		return fmt.Errorf("--route-strategy %q: want round-robin or least-routes", c.RouteStrategy)
	}
	for _, z := range c.DNS.UserZones {
		if err := routing.CheckUserZone(z); err != nil {
			return fmt.Errorf("--dns-user-zone: %w", err)
		}
	}
	if ap, err := netip.ParseAddrPort(c.DNS.Address); err == nil && ap.Addr().IsUnspecified() && len(c.DNS.Nameservers) == 0 {
		return fmt.Errorf("--dns-address %q listens on every address: give --dns-nameserver NAME=IP, the name and address secondaries and resolvers reach this server at (the zones' NS and its glue)", c.DNS.Address)
	}
	return nil
}

// Input is the zones' settings (--dns-user-zone, --dns-nameserver, the NS address).
func (d DNSConfig) Input() (authdns.Input, error) {
	var in authdns.Input
	in.UserZones = d.UserZones
	if ap, err := netip.ParseAddrPort(d.Address); err == nil {
		in.DefaultNSAddr = ap.Addr()
	}
	for _, ns := range d.Nameservers {
		name, ip, _ := strings.Cut(ns, "=")
		n := authdns.Nameserver{Name: name}
		if ip != "" {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				return in, fmt.Errorf("--dns-nameserver %q: %w", ns, err)
			}
			n.Addrs = []netip.Addr{a}
		}
		in.Nameservers = append(in.Nameservers, n)
	}
	return in, nil
}

// ShareDescriptors sets the connection limits not given (given names a flag set by the user)
// from the open-files limit (connlimit.Share): a flood of the API or the metrics port never
// leaves the agents' port without descriptors.
func (c *Config) ShareDescriptors(given func(flag string) bool) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim.Cur = 1 << 20
	}
	connlimit.Share(lim.Cur, &c.MaxConns, &c.Store.APIHTTP.Limits, &c.Metrics.Limits, given)
}
