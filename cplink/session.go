package cplink

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// loop keeps a session up: reconnecting with backoff after every failure.
func (c *Client) loop(ctx context.Context) {
	reloadDone := make(chan struct{})
	go func() {
		defer close(reloadDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.reload:
				c.rebuild(ctx)
			}
		}
	}()
	defer func() { <-reloadDone }()
	failures := 0
	for {
		got, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			c.log.Info("reachable services changed: reconnecting for the dataplanes they add")
			continue // at once, to the same control plane
		}
		if errors.Is(err, errRefetch) {
			c.log.Info("a change accepted after a refused one: reconnecting for what the refused response also carried")
			continue // at once, to the same control plane
		}
		if got {
			failures = 0
		}
		if len(c.targets) > 1 {
			// Another replica next, at once when this one served us (it was lost), after the
			// backoff otherwise.
			c.cur = (c.cur + 1) % len(c.targets)
			if got {
				c.log.Warn("control plane link down; trying the next replica", "error", err, "next", c.targets[c.cur])
				continue
			}
		}
		wait := c.backoff(failures)
		failures++
		c.logFailure(err, failures, wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait after n consecutive failures: Backoff * 2^n capped at MaxBackoff,
// drawn uniformly in [d/2, d] so that agents cut off together do not return together.
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.Backoff
	for i := 0; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// plainText reports whether the link was asked to run without TLS (grpc://, http://).
func (c *Client) plainText() bool {
	return strings.HasPrefix(c.cfg.Address, "grpc://") || strings.HasPrefix(c.cfg.Address, "http://")
}

// hostPort is addr without its scheme.
func hostPort(addr string) string {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		return rest
	}
	return addr
}

func (c *Client) logFailure(err error, attempt int, wait time.Duration) {
	attrs := []any{"cp_address", c.cfg.Address, "attempt", attempt, "retry_in", wait.Round(time.Millisecond)}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		c.log.Error("the control plane refused this dataplane; check --dataplane-token-file, --name and --mesh",
			append(attrs, "error", status.Convert(err).Message())...)
		return
	case codes.ResourceExhausted:
		c.log.Error(fmt.Sprintf("refused a response from the control plane larger than the link takes (%d MiB); keeping the last good model", MaxResponseBytes>>20),
			append(attrs, "error", status.Convert(err).Message())...)
		return
	}
	if te := (*tokenError)(nil); errors.As(err, &te) {
		c.log.Error("cannot read this dataplane's token; trying again (a rotation writes it again)",
			append(attrs, "error", err)...)
		return
	}
	msg := "control plane link down; reconnecting"
	if err != nil && c.plainText() && strings.Contains(err.Error(), "server preface") {
		// A plain-text client reads a TLS server's handshake bytes (or its close) where the
		// HTTP/2 preface should be: gRPC says only "server preface: EOF".
		c.log.Error("the control plane speaks TLS but --cp-address is plain text: use grpcs://"+hostPort(c.cfg.Address),
			append(attrs, "error", err)...)
		return
	}
	if err != nil && strings.Contains(err.Error(), "x509") {
		// gRPC hands the handshake's error over as text only (no x509 error to unwrap).
		switch e := err.Error(); {
		case strings.Contains(e, "has expired or is not yet valid"):
			msg = "the control plane's certificate has expired or is not yet valid: renew it at the control plane (or check this host's clock)"
		case strings.Contains(e, "certificate is valid for"), strings.Contains(e, "doesn't contain any IP SANs"):
			msg = "the control plane's certificate does not name the host of --cp-address: use a name or IP its certificate lists"
		default:
			msg = "the control plane's certificate is not trusted; check --ca-cert-file"
		}
		c.log.Error(msg, append(attrs, "error", err)...)
		return
	}
	c.log.Warn(msg, append(attrs, "error", err)...)
}

// errKeepalive is the cause given to a session whose control plane stopped answering.
var errKeepalive = errors.New("keepalive: the control plane stopped answering")

// session runs one connection and stream until it fails; got is whether any response came.
func (c *Client) session(ctx context.Context) (got bool, err error) {
	token, err := c.token()
	if err != nil {
		return false, err
	}
	conn, err := grpc.NewClient(c.targets[c.cur%len(c.targets)], grpc.WithTransportCredentials(c.creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: max(c.cfg.KeepaliveInterval, 10*time.Second), Timeout: c.cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes)),
		// A replica that accepts connections and never answers (a stopped process, a
		// full accept queue) fails the attempt after the keepalive timeout (at least 1 s), as a silent
		// stream does: the next replica is tried then, not after gRPC's 20 s.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: max(c.cfg.KeepaliveTimeout, time.Second)}))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.mu.Lock()
	c.cancelSession = cancel
	c.mu.Unlock()
	if token != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
	}
	go c.keepalive(sctx, cancel, conn)

	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		return false, causeOf(sctx, err)
	}
	c.mu.Lock()
	clear(c.received) // a new stream: every kind is answered again before the model counts as synced
	clear(c.refused)  // and what it sends starts from the versions held
	for i, kind := range Kinds {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: TypeURL(kind), InitialResourceVersions: c.versionsLocked(kind)}
		if i == 0 {
			req.Node = &core.Node{Id: c.cfg.Name, Cluster: c.cfg.Mesh, UserAgentName: "kuma-dp",
				ClientFeatures: []string{FeatureGzipResources}}
		}
		if err := stream.Send(req); err != nil {
			c.mu.Unlock()
			return false, causeOf(sctx, err)
		}
	}
	c.mu.Unlock()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, causeOf(sctx, err)
		}
		if !got {
			got = true
			c.stats.Sessions.Add(1)
			c.log.Info("connected to the control plane", "cp_address", c.cfg.Address, "name", c.cfg.Name, "mesh", c.cfg.Mesh)
		}
		ack := c.handle(sctx, resp)
		if err := stream.Send(ack); err != nil {
			return got, causeOf(sctx, err)
		}
	}
}

func causeOf(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// keepalive asks the control plane's health service every interval; no answer within the
// timeout ends the session (a stalled stream, a frozen process, a dropped path), so the
// link reconnects instead of waiting on a stream that will never speak again. gRPC's own
// transport keepalive (at least 10 s) runs beneath it.
func (c *Client) keepalive(ctx context.Context, cancel context.CancelCauseFunc, conn *grpc.ClientConn) {
	health := healthpb.NewHealthClient(conn)
	t := time.NewTicker(c.cfg.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, c.cfg.KeepaliveTimeout)
		_, err := health.Check(pctx, &healthpb.HealthCheckRequest{})
		pcancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && status.Code(err) != codes.Unimplemented {
			c.log.Warn("the control plane did not answer the keepalive; dropping the stream", "timeout", c.cfg.KeepaliveTimeout, "error", err)
			cancel(fmt.Errorf("%w within %s: %v", errKeepalive, c.cfg.KeepaliveTimeout, err))
			return
		}
	}
}

// tokenError is a token file that cannot be read: this side's problem, not the link's.
type tokenError struct{ error }

func (e *tokenError) Unwrap() error { return e.error }

func (c *Client) token() (string, error) {
	if c.cfg.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return "", &tokenError{fmt.Errorf("dataplane token (--dataplane-token-file %q): %w", c.cfg.TokenFile, err)}
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", &tokenError{fmt.Errorf("dataplane token (--dataplane-token-file %q): empty", c.cfg.TokenFile)}
	}
	return t, nil
}
