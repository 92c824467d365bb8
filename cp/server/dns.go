package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// shardDNS builds the zones of the router shards from the store and serves them: to the
// agents' resolvers through feed always, and authoritatively on --dns-address when given.
// The zones' serials are kept in etcd on cl, written by the leader (leading); more sinks
// get every catalog built too, once it is served (the API's GET /zones, readiness).
func (c *StoreConfig) shardDNS(ctx context.Context, st cpstore.Store, cl *clientv3.Client, leading func() bool, feed *fanout.Feed, log *slog.Logger, more ...shardzones.Sink) (*authdns.Server, error) {
	in, err := c.DNS.Input()
	if err != nil {
		return nil, err
	}
	if c.DNS.Address == "" && len(in.Nameservers) == 0 {
		// the zones go to the agents only: each answers them itself, on this machine's
		// loopback as far as its pod is concerned
		in.DefaultNSAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	sinks := []shardzones.Sink{shardzones.FeedSink(feed, log)}
	var srv *authdns.Server
	if c.DNS.Address != "" {
		if srv, err = c.DNS.serve(ctx, log); err != nil {
			return nil, err
		}
		sinks = append(sinks, func(z *shardzones.Zones) { srv.Swap(z.All) })
	}
	sinks = append(sinks, more...) // after the zones are served: the last says they are
	// A gateway replica's readiness is in its Router's status (the leader writes it,
	// routerstatus): every replica answers the same, as the views show it.
	serials := shardzones.NewSerials(cl, c.Etcd.Prefix, leading, log)
	go shardzones.Run(ctx, st, in, serials, log, sinks...)
	return srv, nil
}

// serve starts the authoritative server on d.Address (zone transfers, TSIG, NOTIFY).
func (d DNSConfig) serve(ctx context.Context, log *slog.Logger) (*authdns.Server, error) {
	cfg := authdns.Config{Address: d.Address, TSIG: d.TSIG, NotifyKey: d.NotifyKey, Secondaries: d.Secondaries, Log: log}
	for _, p := range d.TransferFrom {
		pre, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("--dns-transfer-from %q: %w", p, err)
		}
		cfg.TransferFrom = append(cfg.TransferFrom, pre)
	}
	srv, err := authdns.New(cfg)
	if err != nil {
		return nil, err
	}
	go srv.Run(ctx)
	return srv, nil
}
