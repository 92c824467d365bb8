package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/mesh"
)

// routesPluginName is the plugin that answers the router shards' names (the shard zones and
// the users' CNAMEs) from the zones the control plane built, with the control plane's own
// answer engine (package authdns): in-mesh clients get the answers `dig @kuma-cp` gives
// without leaving the node. Names outside those zones pass to the next plugin.
const routesPluginName = "kumaroutes"

// routeZones is what a Server answers route names from: the catalog, and each zone's text
// with what it parsed to, so a new model re-parses only the zones that changed.
type routeZones struct {
	mu     sync.Mutex // serializes SwapZones
	parsed map[string]parsedZone
}

type parsedZone struct {
	text string
	zone *authdns.Zone
}

// SwapZones makes zones (the control plane's DNSZones) the route names this resolver
// answers, in one atomic store. A zone that does not parse is left out, named in the error;
// the others are served.
func (s *Server) SwapZones(zones []*mesh.DNSZone) error {
	s.zones.mu.Lock()
	defer s.zones.mu.Unlock()
	next := make(map[string]parsedZone, len(zones))
	var kept []*authdns.Zone
	var errs []error
	for _, dz := range zones {
		if p, ok := s.zones.parsed[dz.Origin]; ok && p.text == dz.Zone {
			next[dz.Origin] = p
			kept = append(kept, p.zone)
			continue
		}
		z, err := authdns.ParseZone(dz.Origin, strings.NewReader(dz.Zone))
		if err != nil {
			errs = append(errs, fmt.Errorf("dnszone %q: %w", dz.Name, err))
			continue
		}
		next[dz.Origin] = parsedZone{text: dz.Zone, zone: z}
		kept = append(kept, z)
	}
	s.zones.parsed = next
	s.routes.Store(authdns.NewCatalog(kept...))
	s.log.Debug("route zones swapped", "zones", len(kept))
	return errors.Join(errs...)
}

// answerRoute answers the UDP query packet p from the route zones' prepared form when it
// asks for a name of theirs and the prepared form takes it (the UDP fast path calls it for
// the packets that are not VIP names; the prepared form echoes the query's DO bit, RFC 3225
// 3); ok false leaves the packet to CoreDNS's chain.
func (s *Server) answerRoute(out, p []byte) ([]byte, bool) {
	cat := s.routes.Load()
	if cat == nil {
		return out, false
	}
	resp, rcode, ok := cat.AppendAnswer(out, p, true)
	if !ok || rcode == dns.RcodeRefused { // REFUSED: outside every zone, not ours
		return out, false
	}
	resp[len(out)+3] |= flagRA // RA: this server recurses (the chain's answers have it too)

	off := 12 // the question's type follows its name (well formed: the prepared form took it)
	for p[off] != 0 {
		off += 1 + int(p[off])
	}
	s.met.answer(srcLocal, uint16(p[off+1])<<8|uint16(p[off+2]))
	return resp, true
}

// setupRoutes parses "kumaroutes <id>" and adds the handler of that server.
func setupRoutes(c *caddy.Controller) error {
	var s *Server
	for c.Next() {
		args := c.RemainingArgs()
		if len(args) != 1 {
			return plugin.Error(routesPluginName, c.ArgErr())
		}
		registryMu.Lock()
		s = registry[args[0]]
		registryMu.Unlock()
		if s == nil {
			return plugin.Error(routesPluginName, fmt.Errorf("no kuma-dp resolver with id %q: this plugin only runs inside kuma-dp", args[0]))
		}
		if c.NextBlock() {
			return plugin.Error(routesPluginName, c.Errf("unexpected option %q (kumaroutes takes no options)", c.Val()))
		}
	}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler { return &routesHandler{s: s, next: next} })
	return nil
}

// routesHandler answers the names of the route zones; the rest goes to the next plugin.
type routesHandler struct {
	s    *Server
	next plugin.Handler
}

func (h *routesHandler) Name() string { return routesPluginName }

func (h *routesHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	cat := h.s.routes.Load()
	if len(r.Question) != 1 || !cat.Holds(r.Question[0].Name) {
		return plugin.NextOrFailure(routesPluginName, h.next, ctx, w, r)
	}
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	resp := cat.Reply(r, tcp)
	h.s.met.answer(srcLocal, r.Question[0].Qtype)
	if err := w.WriteMsg(resp); err != nil {
		return dns.RcodeServerFailure, plugin.Error(routesPluginName, err)
	}
	return dns.RcodeSuccess, nil // written: CoreDNS must not write an error answer too
}
