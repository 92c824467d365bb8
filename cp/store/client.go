package store

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Keepalive of the client's connections to etcd: a connection whose member stops
// answering (frozen, or cut off without its connection closing) is closed after
// KeepAliveTime of silence and KeepAliveTimeout more, and its streams (watches, lease
// renewals) start again on another member. gRPC pings no more often than every 10 s (a
// lower time is raised to it), and etcd's default --grpc-keepalive-min-time is 5 s.
// Requests do not wait for it: each attempt has its own timeout, the next goes to another
// member (Etcd.attempts), and Health steers requests away from a member that does not
// answer its probe.
const (
	KeepAliveTime    = 10 * time.Second
	KeepAliveTimeout = 2 * time.Second
)

// Client is an etcd client for the store: requests spread over the members; beside it, a
// client of each member alone, which Health probes to keep requests on those that answer.
type Client struct {
	*clientv3.Client
	members []member
	log     *slog.Logger
}

// member is one endpoint and a client of it alone.
type member struct {
	endpoint string
	c        *clientv3.Client
}

// NewClient is a Client of cfg's endpoints (with cfg's TLS and credentials), with the
// keepalive above and the etcd client's own logs sent to log at debug level (a replica's
// outages are logged once each, by Health, not once per retry).
func NewClient(cfg clientv3.Config, log *slog.Logger) (*Client, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = KeepAliveTime, KeepAliveTimeout
	cfg.Logger = zap.New(slogCore{log: log.With("part", "etcd-client")})
	main, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{Client: main, log: log}
	if len(cfg.Endpoints) > 1 {
		for _, ep := range cfg.Endpoints {
			one := cfg
			one.Endpoints = []string{ep}
			mc, err := clientv3.New(one)
			if err != nil {
				c.Close()
				return nil, err
			}
			c.members = append(c.members, member{ep, mc})
		}
	}
	return c, nil
}

// Store is the store under prefix on c (NewEtcd), its Health steering c's requests, the
// keys it skips logged (part=store).
func (c *Client) Store(prefix string) *Etcd {
	s := NewEtcd(c.Client, prefix)
	s.members = c.members
	s.Log = c.log.With("part", "store")
	return s
}

// Close closes the client and the members' clients.
func (c *Client) Close() error {
	for _, m := range c.members {
		m.c.Close()
	}
	return c.Client.Close()
}

// slogCore is a zap core writing the etcd client's warnings and errors to a slog.Logger at
// debug level (its own debug lines, one per request, are dropped).
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.WarnLevel && c.log.Enabled(context.Background(), slog.LevelDebug)
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{log: c.log, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(c.fields[:len(c.fields):len(c.fields)], fields...) {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields)+2)
	args = append(args, "client_level", e.Level.String())
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		args = append(args, k, enc.Fields[k])
	}
	c.log.Debug(e.Message, args...)
	return nil
}

func (c slogCore) Sync() error { return nil }

// Members is etcd's members as reached from a client: how many there are, how many answer a
// status request, and those that do not (name and client URLs).
type Members struct {
	Total, Reachable int
	Down             []string
}

// Members asks etcd for its members (within list) and each member for its status (within
// member).
func (c *Client) Members(list, member time.Duration) (Members, error) {
	ctx, cancel := context.WithTimeout(context.Background(), list)
	defer cancel()
	ml, err := c.MemberList(ctx)
	if err != nil {
		return Members{}, err
	}
	answers := func(url string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), member)
		defer cancel()
		_, err := c.Status(ctx, url)
		return err == nil
	}
	m := Members{Total: len(ml.Members)}
	for _, mb := range ml.Members {
		if slices.ContainsFunc(mb.ClientURLs, answers) {
			m.Reachable++
		} else {
			m.Down = append(m.Down, mb.Name+" ("+strings.Join(mb.ClientURLs, ",")+")")
		}
	}
	return m, nil
}
