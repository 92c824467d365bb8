package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kumadp/kuma-dp/bootstrap"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/dirsource"
	"github.com/kumadp/kuma-dp/dnsserver"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// Files the agent keeps in its work dir.
const (
	StateFileName = "vips.json" // the allocator's sticky VIPs
	// DecodeCacheDirName holds the decoded files, one entry per file, to skip decoding on
	// restart; the single file of the cache's previous format (DecodeCacheDirName + ".gob")
	// is removed by the first write.
	DecodeCacheDirName = "model-cache"
	ModelFileName      = "cp-model.gob" // the control plane's last model, for a start without it
)

// Build makes the real parts from the configuration: the directory source, the allocator
// (sticky through a state file in the work dir), the resolver and, when wanted and found,
// Envoy. cleanup releases what Build made that outlives Run (none of it serves until Run).
//
// The work dir is locked until cleanup; when Build fails, or when cleanup(true) says the start
// failed, what this start created in it is removed.
func Build(ctx context.Context, cfg Config, log *slog.Logger) (parts Parts, cleanup func(failed bool), err error) {
	if err := checkReadyFileDir(cfg.Runtime.ReadyFile); err != nil {
		return Parts{}, func(bool) {}, err
	}
	wd, err := openWorkDir(cfg)
	if err != nil {
		return Parts{}, func(bool) {}, err
	}
	cleanup = func(failed bool) {
		wd.release()
		if failed {
			wd.removeCreated()
		}
	}
	defer func() {
		if err != nil {
			cleanup(true)
			cleanup = func(bool) {}
		}
	}()
	workDir := wd.path
	log.Info("work dir", "path", workDir)
	src, err := newSource(cfg, workDir, log.With("part", "source"))
	if err != nil {
		return Parts{}, cleanup, err
	}
	ac := vipalloc.DefaultConfig()
	ac.StateFile = filepath.Join(workDir, StateFileName)
	ac.Logger = log.With("part", "vipalloc")
	alloc, err := vipalloc.New(ac)
	if err != nil {
		return Parts{}, cleanup, err
	}
	dns, err := dnsserver.New(dnsserver.Config{
		Addrs:            dnsAddrs(cfg.DNS),
		TTL:              uint32(time.Duration(cfg.DNS.TTL) / time.Second),
		Upstreams:        cfg.DNS.Upstreams,
		ResolvConf:       cfg.DNS.ResolvConf,
		CorefileTemplate: cfg.DNS.CorefileTemplate,
		Logger:           log.With("part", "dns"),
	})
	if err != nil {
		return Parts{}, cleanup, err
	}
	parts = Parts{Source: src, Allocator: alloc, DNS: dns, PoolSizes: poolSizes(ac)}
	if cfg.TransparentProxy.Enabled {
		parts.TransparentProxy = newTransparentProxy(cfg, workDir, log.With("part", "tproxy"))
	}
	if !cfg.Runtime.Envoy {
		return parts, cleanup, nil
	}
	bin, err := bootstrap.FindEnvoy(cfg.Runtime.BinaryPath)
	if err != nil {
		if cfg.Runtime.BinaryPath != "" { // asked for explicitly: a mistake, not a choice
			return Parts{}, cleanup, err // names --binary-path and the path
		}
		log.Warn("Envoy not found: serving DNS alone; install Envoy, pass --binary-path, or --envoy=false to silence this", "error", err)
		return parts, cleanup, nil
	}
	envoy, err := newEnvoyPart(cfg, workDir, bin, log.With("part", "envoy"))
	if err != nil {
		return Parts{}, cleanup, err
	}
	parts.Envoy = envoy
	return parts, cleanup, nil
}

// newSource is the model's source: the control-plane link when a control plane is given,
// else the files.
func newSource(cfg Config, workDir string, log *slog.Logger) (cplink.Source, error) {
	if cfg.ControlPlane.URL != "" {
		return cplink.NewClient(cplink.ClientConfig{
			Address:           cfg.ControlPlane.URL,
			CACertFile:        cfg.ControlPlane.CACertFile,
			TokenFile:         cfg.Runtime.TokenPath,
			Name:              cfg.Dataplane.Name,
			Mesh:              cfg.Dataplane.Mesh,
			DataplaneFile:     cfg.Runtime.DataplaneFile,
			DataplaneVars:     cfg.Runtime.ResourceVars,
			Backoff:           time.Duration(cfg.ControlPlane.RetryBackoff),
			KeepaliveInterval: time.Duration(cfg.ControlPlane.KeepaliveInterval),
			ModelFile:         filepath.Join(workDir, ModelFileName),
		}, log)
	}
	return dirsource.NewFiles(dirsource.FilesConfig{
		DataplaneFile: cfg.Runtime.DataplaneFile,
		DataplaneVars: cfg.Runtime.ResourceVars,
		PoliciesDir:   cfg.Runtime.PoliciesDir,
		Watch:         cfg.Runtime.Watch,
		CacheDir:      filepath.Join(workDir, DecodeCacheDirName),
		MaxFileBytes:  sizeLimit(cfg.Runtime.MaxFileSizeMiB),
		MaxTotalBytes: sizeLimit(cfg.Runtime.MaxTotalSizeMiB),
	}, log)
}

// sizeLimit turns a limit in MiB (0: none) into cplink's bytes (negative: none).
func sizeLimit(mib int64) int64 {
	if mib == 0 {
		return -1
	}
	return mib << 20
}

// poolSizes is the IPv4 size of each pool: the external pool is carved out of the service
// pool when inside it (vipalloc never hands it out from there).
func poolSizes(c vipalloc.Config) map[string]float64 {
	size := func(p netip.Prefix) float64 { return math.Exp2(float64(32 - p.Bits())) }
	svc, err1 := netip.ParsePrefix(c.ServiceCIDR)
	ext, err2 := netip.ParsePrefix(c.ExternalCIDR)
	if err1 != nil || err2 != nil || !svc.Addr().Is4() || !ext.Addr().Is4() {
		return nil
	}
	out := map[string]float64{"service": size(svc), "external": size(ext)}
	if svc.Bits() <= ext.Bits() && svc.Contains(ext.Addr()) {
		out["service"] -= size(ext)
	}
	return out
}

// dnsAddrs joins the listen IPs with the port (by default dnsserver's: 127.0.0.1, and ::1
// where the host has IPv6 loopback).
func dnsAddrs(c DNSConfig) []string {
	if len(c.Addresses) == 0 {
		return dnsserver.DefaultAddrs(c.ProxyPort)
	}
	out := make([]string, len(c.Addresses))
	for i, ip := range c.Addresses {
		out[i] = net.JoinHostPort(ip, strconv.Itoa(c.ProxyPort))
	}
	return out
}

// checkReadyFileDir refuses a ready file that could not be written once ready (its
// directory missing or not writable): the agent would serve without it, and whoever waits
// for the file would wait for ever.
func checkReadyFileDir(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return fmt.Errorf("--ready-file (KUMA_DATAPLANE_RUNTIME_READY_FILE, dataplaneRuntime.readyFile) %q: cannot be written: %w", path, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
