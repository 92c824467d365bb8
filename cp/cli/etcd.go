// Package cli is kuma-cp's client side: the API commands apply, get, delete, describe and
// inspect (client.go, routes.go: their command lines, checks and output, through package
// api's client), the client configuration of those commands (config.go, configcmd.go: the
// control planes, as kumactl's) and the etcd connection flags of every command that talks
// to etcd directly (serve, zones; etcd.go). cmd/kuma-cp only dispatches to them.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

// Etcd is the connection to etcd, as flags: the endpoints, TLS and a user.
type Etcd struct {
	Endpoints, Prefix, CAFile, CertFile, KeyFile, Username, PasswordFile string
}

// Bind adds the flags (--etcd-endpoints, --etcd-prefix, --etcd-ca-file, --etcd-cert-file,
// --etcd-key-file, --etcd-username, --etcd-password-file) to fs.
func (e *Etcd) Bind(fs *pflag.FlagSet, endpointsHelp string) {
	fs.StringVar(&e.Endpoints, "etcd-endpoints", "", endpointsHelp)
	fs.StringVar(&e.Prefix, "etcd-prefix", "/kuma", "key prefix of this installation in etcd: one path segment (its keys are under /kuma/, /kuma-leader/, /kuma-presence/, /kuma-zones/)")
	fs.StringVar(&e.CAFile, "etcd-ca-file", "", "CA (PEM) of etcd's certificate (TLS to etcd: https:// endpoints)")
	fs.StringVar(&e.CertFile, "etcd-cert-file", "", "client certificate (PEM) for etcd")
	fs.StringVar(&e.KeyFile, "etcd-key-file", "", "client key (PEM) for etcd")
	fs.StringVar(&e.Username, "etcd-username", "", "etcd user (with --etcd-password-file)")
	fs.StringVar(&e.PasswordFile, "etcd-password-file", "", "file holding the etcd user's password")
}

// config is the client's configuration; files that cannot be read are named by flag.
func (e *Etcd) config() (clientv3.Config, error) {
	cfg := clientv3.Config{Endpoints: strings.Split(e.Endpoints, ","), DialTimeout: 5 * time.Second, Username: e.Username}
	if e.PasswordFile != "" {
		pw, err := os.ReadFile(e.PasswordFile)
		if err != nil {
			return cfg, fmt.Errorf("--etcd-password-file %q: %w", e.PasswordFile, err)
		}
		cfg.Password = strings.TrimSpace(string(pw))
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		return cfg, errors.New("--etcd-cert-file and --etcd-key-file go together")
	}
	if e.CAFile != "" || e.CertFile != "" || e.tlsEndpoints() {
		tc, err := (transport.TLSInfo{TrustedCAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}).ClientConfig()
		if err != nil {
			return cfg, fmt.Errorf("etcd TLS (--etcd-ca-file, --etcd-cert-file, --etcd-key-file): %w", err)
		}
		tc.MinVersion = tls.VersionTLS12
		cfg.TLS = tc
	}
	return cfg, nil
}

func (e *Etcd) tlsEndpoints() bool {
	for _, ep := range strings.Split(e.Endpoints, ",") {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return false
}

// Client connects to etcd (cp/store's client: keepalive, the etcd client's logs at debug
// level on log). It does not wait for etcd: see Check.
func (e *Etcd) Client(log *slog.Logger) (*cpstore.Client, error) {
	cfg, err := e.config()
	if err != nil {
		return nil, err
	}
	cl, err := cpstore.NewClient(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("--etcd-endpoints %q: %w", e.Endpoints, err)
	}
	return cl, nil
}

// Check dials every https:// endpoint with the TLS settings and returns the first
// handshake's error, naming the endpoint and the flags: etcd's client retries such a
// failure until its deadline and reports "context deadline exceeded", the certificate's
// problem hidden. An endpoint not reached at all is no error here (etcd may be starting).
func (e *Etcd) Check(ctx context.Context) error {
	cfg, err := e.config()
	if err != nil {
		return err
	}
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("--etcd-endpoints: %q: want http://HOST:PORT or https://HOST:PORT", ep)
		}
		if u.Scheme != "https" {
			continue
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: cfg.TLS.Clone()}
		d.Config.ServerName = u.Hostname()
		conn, err := d.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			conn.Close()
			continue
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			continue // not reached: not a TLS problem
		}
		return fmt.Errorf("etcd %s: TLS: %w (check --etcd-ca-file, --etcd-cert-file, --etcd-key-file)", ep, err)
	}
	return nil
}
