package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kumadp/kuma-dp/tproxy"
)

// transparentProxy installs Kuma's default transparent proxy, with DNS redirected to the
// agent's resolver port and the agent's own user excluded (its upstream queries and Envoy's
// connections must not loop back to itself).
type transparentProxy struct {
	cfg tproxy.Config
	log *slog.Logger
}

func newTransparentProxy(cfg Config, workDir string, log *slog.Logger) *transparentProxy {
	c := tproxy.DefaultConfig()
	if cfg.DNS.ProxyPort != 0 {
		c.RedirectDNSPort = uint16(cfg.DNS.ProxyPort)
	}
	c.KumaDPUser = strconv.Itoa(os.Getuid())
	c.StateFile = filepath.Join(workDir, "tproxy-state.json")
	if os.Getuid() == 0 {
		log.Warn("running as root: the transparent proxy leaves every root process's traffic alone; run kuma-dp as its own user (e.g. UID 5678)")
	}
	return &transparentProxy{cfg: c, log: log}
}

func (t *transparentProxy) Install(ctx context.Context) error {
	return tproxy.Install(ctx, t.cfg, t.log)
}

func (t *transparentProxy) Uninstall(ctx context.Context) error {
	return tproxy.Uninstall(ctx, t.cfg, t.log)
}
