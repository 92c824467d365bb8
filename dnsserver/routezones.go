package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

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
	// origins: every zone's origin (lower case, fully qualified) -> whether it is partial (a
	// users' domain holding this mesh's names only: a name it does not hold goes upstream).
	origins atomic.Pointer[map[string]bool]
}

type parsedZone struct {
	text    string
	partial bool
	zone    *authdns.Zone
}

// partialMiss reports whether a name the route zones answer NXDOMAIN for lies in a partial
// zone (its closest zone is one): not this mesh's name, so it goes upstream.
func (z *routeZones) partialMiss(name string) bool {
	origins := z.origins.Load()
	if origins == nil {
		return false
	}
	name = strings.ToLower(dns.Fqdn(name))
	for {
		if partial, ok := (*origins)[name]; ok {
			return partial
		}
		i := strings.IndexByte(name, '.')
		if i < 0 || i == len(name)-1 {
			return false
		}
		name = name[i+1:]
	}
}

// SwapZones makes zones (the control plane's DNSZones) the route names this resolver
// answers, in one atomic store. A zone that does not parse is left out, named in the error;
// the others are served.
func (s *Server) SwapZones(zones []*mesh.DNSZone) error {
	s.zones.mu.Lock()
	defer s.zones.mu.Unlock()
	next := make(map[string]parsedZone, len(zones))
	origins := make(map[string]bool, len(zones))
	var kept []*authdns.Zone
	var errs []error
	for _, dz := range zones {
		p, ok := s.zones.parsed[dz.Origin]
		if !ok || p.text != dz.Zone {
			z, err := authdns.ParseZone(dz.Origin, strings.NewReader(dz.Zone))
			if err != nil {
				errs = append(errs, fmt.Errorf("dnszone %q: %w", dz.Name, err))
				continue
			}
			p = parsedZone{text: dz.Zone, zone: z}
		}
		p.partial = dz.Partial
		next[dz.Origin] = p
		origins[p.zone.Origin] = p.partial
		kept = append(kept, p.zone)
	}
	s.zones.parsed = next
	s.zones.origins.Store(&origins) // before the catalog: a partial zone's miss is never answered
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
	if rcode == dns.RcodeNameError && s.zones.partialMiss(wireName(p)) { // another mesh's name
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
	if resp.Rcode == dns.RcodeNameError && h.s.zones.partialMiss(r.Question[0].Name) { // another mesh's name
		return plugin.NextOrFailure(routesPluginName, h.next, ctx, w, r)
	}
	h.s.met.answer(srcLocal, r.Question[0].Qtype)
	if err := w.WriteMsg(resp); err != nil {
		return dns.RcodeServerFailure, plugin.Error(routesPluginName, err)
	}
	return dns.RcodeSuccess, nil // written: CoreDNS must not write an error answer too
}

// wireName is the question name of a well-formed query packet (the prepared form took it),
// in presentation form.
func wireName(p []byte) string {
	var b strings.Builder
	for off := headerLen; off < len(p) && p[off] != 0 && off+1+int(p[off]) <= len(p); off += 1 + int(p[off]) {
		b.Write(p[off+1 : off+1+int(p[off])])
		b.WriteByte('.')
	}
	return b.String()
}
