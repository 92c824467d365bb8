package tproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Interface is one network interface as found by netlink.
type Interface struct {
	Name  string         `json:"name"`
	Index int            `json:"index"`
	Up    bool           `json:"up"`
	Addrs []netip.Prefix `json:"addresses"`
}

func (i Interface) String() string {
	state := "down"
	if i.Up {
		state = "up"
	}
	return fmt.Sprintf("%s (index %d, %s) %v", i.Name, i.Index, state, i.Addrs)
}

// netState is what Install changed with netlink, kept in Config.StateFile so Uninstall
// removes exactly that.
type netState struct {
	Routes    []addedRoute   `json:"routes,omitempty"`
	Addresses []netip.Prefix `json:"addresses,omitempty"` // on the loopback
}

// addedRoute is an on-link route Install added for a VIP range.
type addedRoute struct {
	Dst netip.Prefix `json:"dst"`
	Dev string       `json:"dev"`
}

func familyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

func nlFamily(f Family) int {
	if f == IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// openHandle opens netlink in the config's network namespace (or the current one).
func openHandle(c Config) (*netlink.Handle, error) {
	if c.NetNS == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromName(c.NetNS)
	if err != nil {
		return nil, fmt.Errorf("network namespace %q: %w", c.NetNS, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// Interfaces lists the interfaces and their addresses.
func Interfaces(c Config) ([]Interface, error) {
	h, err := openHandle(c)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return listInterfaces(h)
}

func listInterfaces(h *netlink.Handle) ([]Interface, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netlink: list links: %w", err)
	}
	var out []Interface
	for _, l := range links {
		a := l.Attrs()
		it := Interface{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("netlink: addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			if p, ok := toPrefix(ad.IPNet); ok {
				it.Addrs = append(it.Addrs, p)
			}
		}
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b Interface) int { return a.Index - b.Index })
	return out, nil
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// coveringRoute returns the main-table unicast route that covers all of p, if any.
func coveringRoute(h *netlink.Handle, p netip.Prefix) (*netlink.Route, error) {
	routes, err := h.RouteListFiltered(nlFamily(familyOf(p.Addr())), &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("netlink: list routes: %w", err)
	}
	for i, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		if r.Dst == nil {
			return &routes[i], nil // default route
		}
		d, ok := toPrefix(r.Dst)
		if ok && d.Bits() <= p.Bits() && d.Contains(p.Addr()) {
			return &routes[i], nil
		}
	}
	return nil, nil
}

// hasRoute reports whether the route "r.Dst dev r.Dev" exists in the main table.
func hasRoute(h *netlink.Handle, r addedRoute) bool {
	l, err := h.LinkByName(r.Dev)
	if err != nil {
		return false
	}
	routes, err := h.RouteListFiltered(nlFamily(familyOf(r.Dst.Addr())), &netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: toIPNet(r.Dst), LinkIndex: l.Attrs().Index}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST|netlink.RT_FILTER_OIF)
	return err == nil && len(routes) > 0
}

// routeDevice picks the interface a VIP range is routed to when nothing covers it: the first
// interface that is up, not the loopback, with a global address of the family. Not the
// loopback: the rules leave the applications' loopback traffic alone, and Linux turns IPv6
// routes via lo into reject routes. The route only has to exist: the connection is
// redirected to Envoy before it would leave.
func routeDevice(h *netlink.Handle, f Family) (netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netlink: list links: %w", err)
	}
	slices.SortFunc(links, func(a, b netlink.Link) int { return a.Attrs().Index - b.Attrs().Index })
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := h.AddrList(l, nlFamily(f))
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if ad.Scope == unix.RT_SCOPE_UNIVERSE {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("no interface is up with a global %s address", f)
}

// RouteStatus says how one VIP range is routed.
type RouteStatus struct {
	Range   netip.Prefix `json:"range"`
	Covered string       `json:"coveredBy,omitempty"` // the route that covers it, if any
}

func (r RouteStatus) String() string {
	if r.Covered == "" {
		return r.Range.String() + ": no route covers it (install adds an on-link route)"
	}
	return r.Range.String() + ": covered by " + r.Covered
}

// VIPRoutes reports, for each VIP range of the configured families, the route covering it.
func VIPRoutes(c Config) ([]RouteStatus, error) {
	h, err := openHandle(c)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var out []RouteStatus
	for _, p := range vipRanges(c) {
		r, err := coveringRoute(h, p)
		if err != nil {
			return nil, err
		}
		st := RouteStatus{Range: p}
		if r != nil {
			st.Covered = describeRoute(h, r)
		}
		out = append(out, st)
	}
	return out, nil
}

func describeRoute(h *netlink.Handle, r *netlink.Route) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	s := dst
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
		s += " dev " + l.Attrs().Name
	}
	return s
}

func vipRanges(c Config) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.VIPRanges {
		if slices.Contains(c.Families(), familyOf(p.Addr())) {
			out = append(out, p.Masked())
		}
	}
	return out
}

// ensureNet makes every VIP range routable (a route via lo when nothing covers it) and, in
// dual-stack mode, puts ::6 (Envoy's IPv6 inbound passthrough source) on lo. It returns the
// state to remember: what it added now plus what an earlier install added and is still there.
func ensureNet(c Config, log *slog.Logger) (netState, error) {
	old, err := loadState(statePath(c))
	if err != nil {
		return netState{}, err
	}
	h, err := openHandle(c)
	if err != nil {
		return netState{}, err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return netState{}, fmt.Errorf("netlink: loopback: %w", err)
	}
	n := &netInstall{c: c, log: log, h: h, lo: lo, old: old}
	for _, p := range vipRanges(c) {
		if err := n.ensureRoute(p); err != nil {
			return n.st, err
		}
	}
	if slices.Contains(c.Families(), IPv6) {
		if err := n.ensurePassthroughAddr(); err != nil {
			return n.st, err
		}
	}
	// What an earlier install added and this config no longer wants (another family mode,
	// other VIP ranges) is ours to remove.
	if err := deleteNet(h, lo, staleNet(old, n.st), log); err != nil {
		return n.st, err
	}
	return n.st, saveState(statePath(c), n.st)
}

// netInstall is one install's work on routes and addresses: what an earlier install
// recorded (old) and what this one holds so far (st).
type netInstall struct {
	c       Config
	log     *slog.Logger
	h       *netlink.Handle
	lo      netlink.Link
	old, st netState
}

// record writes the state file before next is added: a route or address we cannot record
// is never added, so uninstall always knows every one of ours.
func (n *netInstall) record(next netState) error {
	return saveState(statePath(n.c), merged(n.old, n.st, next))
}

// ensureRoute makes the VIP range p routable: an earlier install's route still there is
// kept, a route covering p is left alone, else a link route is added on the family's device.
// A range with no device to route it is logged, not an error.
func (n *netInstall) ensureRoute(p netip.Prefix) error {
	if i := slices.IndexFunc(n.old.Routes, func(r addedRoute) bool { return r.Dst == p }); i >= 0 && hasRoute(n.h, n.old.Routes[i]) {
		n.st.Routes = append(n.st.Routes, n.old.Routes[i]) // ours, from an earlier install
		return nil
	}
	r, err := coveringRoute(n.h, p)
	if err != nil {
		return err
	}
	if r != nil {
		n.log.Info("VIP range routable", "range", p, "route", describeRoute(n.h, r))
		return nil
	}
	dev, err := routeDevice(n.h, familyOf(p.Addr()))
	if err != nil {
		n.log.Warn("VIP range not routable: applications will get 'network unreachable'", "range", p, "error", err)
		return nil
	}
	route := &netlink.Route{LinkIndex: dev.Attrs().Index, Dst: toIPNet(p), Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN}
	added := addedRoute{Dst: p, Dev: dev.Attrs().Name}
	if err := n.record(netState{Routes: []addedRoute{added}}); err != nil {
		return fmt.Errorf("cannot record the VIP route %s before adding it, so it was not added: %w", p, err)
	}
	if err := n.h.RouteAdd(route); err != nil {
		_ = n.record(netState{})
		return fmt.Errorf("netlink: add route %s dev %s: %w", p, dev.Attrs().Name, err)
	}
	n.st.Routes = append(n.st.Routes, added)
	n.log.Info("VIP range had no route: added one", "range", p, "dev", dev.Attrs().Name)
	return nil
}

// ensurePassthroughAddr puts ::6, the IPv6 inbound passthrough address, on lo: kept when an
// earlier install added it, left alone when someone else did. A kernel refusing it (IPv6
// disabled) is logged, not an error.
func (n *netInstall) ensurePassthroughAddr() error {
	six := netip.MustParsePrefix("::6/128")
	addrs, err := n.h.AddrList(n.lo, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("netlink: addresses of lo: %w", err)
	}
	present := slices.ContainsFunc(addrs, func(a netlink.Addr) bool { p, _ := toPrefix(a.IPNet); return p == six })
	switch {
	case present && slices.Contains(n.old.Addresses, six):
		n.st.Addresses = append(n.st.Addresses, six)
		return nil
	case present:
		return nil
	}
	if err := n.record(netState{Addresses: []netip.Prefix{six}}); err != nil {
		return fmt.Errorf("cannot record the address %s on lo before adding it, so it was not added: %w", six, err)
	}
	if err := n.h.AddrAdd(n.lo, &netlink.Addr{IPNet: toIPNet(six)}); err != nil {
		_ = n.record(netState{})
		n.log.Warn("cannot add ::6 to lo (IPv6 disabled?): IPv6 inbound passthrough will not work", "error", err)
		return nil
	}
	n.st.Addresses = append(n.st.Addresses, six)
	n.log.Info("added the inbound passthrough address", "address", six, "dev", "lo")
	return nil
}

// staleNet is what old holds that st does not: an earlier install's routes and addresses this
// one no longer wants.
func staleNet(old, st netState) netState {
	var out netState
	for _, r := range old.Routes {
		if !slices.ContainsFunc(st.Routes, func(n addedRoute) bool { return n.Dst == r.Dst }) {
			out.Routes = append(out.Routes, r)
		}
	}
	for _, a := range old.Addresses {
		if !slices.Contains(st.Addresses, a) {
			out.Addresses = append(out.Addresses, a)
		}
	}
	return out
}

// merged is everything the state file must name while an install is under way: what an
// earlier install added (not removed yet), what this one added, and what it is about to add.
func merged(old, st, next netState) netState {
	var out netState
	for _, s := range []netState{old, st, next} {
		for _, r := range s.Routes {
			if !slices.ContainsFunc(out.Routes, func(o addedRoute) bool { return o.Dst == r.Dst }) {
				out.Routes = append(out.Routes, r)
			}
		}
		for _, a := range s.Addresses {
			if !slices.Contains(out.Addresses, a) {
				out.Addresses = append(out.Addresses, a)
			}
		}
	}
	return out
}

// removeNet removes what the state file says Install added, then the state file.
func removeNet(c Config, log *slog.Logger) error {
	st, err := loadState(statePath(c))
	if err != nil {
		return err
	}
	if len(st.Routes) == 0 && len(st.Addresses) == 0 {
		return removeState(statePath(c))
	}
	h, err := openHandle(c)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netlink: loopback: %w", err)
	}
	if err := deleteNet(h, lo, st, log); err != nil {
		return err
	}
	return removeState(statePath(c))
}

// deleteNet deletes the routes and loopback addresses in st; those already gone are fine.
func deleteNet(h *netlink.Handle, lo netlink.Link, st netState, log *slog.Logger) error {
	var errs []error
	for _, r := range st.Routes {
		l, err := h.LinkByName(r.Dev)
		if err != nil {
			continue // the interface is gone, and its routes with it
		}
		err = h.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: toIPNet(r.Dst), Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN})
		if err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("netlink: delete route %s dev %s: %w", r.Dst, r.Dev, err))
			continue
		}
		log.Info("removed VIP route", "range", r.Dst, "dev", r.Dev)
	}
	for _, p := range st.Addresses {
		err := h.AddrDel(lo, &netlink.Addr{IPNet: toIPNet(p)})
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("netlink: delete address %s from lo: %w", p, err))
			continue
		}
		log.Info("removed address", "address", p, "dev", "lo")
	}
	return errors.Join(errs...)
}

// hasPassthroughAddr reports whether ::6 is on lo.
func hasPassthroughAddr(c Config) (bool, error) {
	ifs, err := Interfaces(c)
	if err != nil {
		return false, err
	}
	six := netip.MustParsePrefix("::6/128")
	for _, i := range ifs {
		if i.Name == "lo" && slices.Contains(i.Addrs, six) {
			return true, nil
		}
	}
	return false, nil
}
