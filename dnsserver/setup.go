package dnsserver

// setup.go registers the kumavip plugin with CoreDNS and parses its Corefile line
// ("kumavip <id>", README.md); the handler is kumavip.go.

import (
	"fmt"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	// The plugins a Corefile may use, registered by their init functions.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/log"
)

const pluginName = "kumavip"

// directives is the chain order (CoreDNS orders plugins by this list, not by the
// Corefile): kumavip and kumaroutes answer before cache, so their answers are never cached.
var directives = []string{"bind", "errors", "log", pluginName, routesPluginName, "cache", "forward"}

var (
	registerOnce sync.Once
	registerErr  error

	// registry maps the id written in a Corefile to the server it belongs to.
	registryMu sync.Mutex
	registry   = map[string]*Server{}
	idMu       sync.Mutex
	idSeq      uint64
)

// registerPlugin registers kumavip and the directive order, once per process: both are
// process-global in CoreDNS, and registering a plugin twice panics.
func registerPlugin() error {
	registerOnce.Do(func() {
		dnsserver.Quiet = true
		caddy.Quiet = true
		plugin.Register(pluginName, setup)
		plugin.Register(routesPluginName, setupRoutes)
		registerErr = dnsserver.SetDirectives(directives)
	})
	return registerErr
}

// setup parses "kumavip <id>", finds the server, and adds the handler. It also withholds
// the block's listen hosts from CoreDNS: Run binds the sockets itself, after caddy.Start.
func setup(c *caddy.Controller) error {
	var s *Server
	for c.Next() {
		if s != nil {
			return plugin.Error(pluginName, c.Err("only one kumavip line per server block"))
		}
		args := c.RemainingArgs()
		if len(args) != 1 {
			return plugin.Error(pluginName, c.ArgErr())
		}
		registryMu.Lock()
		s = registry[args[0]]
		registryMu.Unlock()
		if s == nil {
			return plugin.Error(pluginName, fmt.Errorf("no kuma-dp resolver with id %q: this plugin only runs inside kuma-dp", args[0]))
		}
		if c.NextBlock() {
			return plugin.Error(pluginName, c.Errf("unexpected option %q (kumavip takes no options)", c.Val()))
		}
	}
	cfg := dnsserver.GetConfig(c)
	// Every opcode reaches the handler, which answers NOTIMP to those other than QUERY and
	// NOTIFY itself: miekg/dns's own NOTIMP drops the query's OPT record (RFC 6891 6.1.1).
	for op := range 16 {
		if op != dns.OpcodeQuery && op != dns.OpcodeNotify {
			cfg.AllowOpcode(op)
		}
	}
	s.capture(cfg, c.Context())
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler { return &handler{s: s, next: next} })
	return nil
}
