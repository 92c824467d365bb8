package vipalloc

import (
	"fmt"
	"io"
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

// Explain prints which policy, selector and tuple produced host, and what it beat or lost to.
// It reports false when nothing produced host. kuma-dp vips --explain prints it, and the
// control plane's GUI shows it for a dataplane.
func (t *Table) Explain(w io.Writer, host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var es []*Entry
	for _, e := range t.Entries() {
		if nameIs(e.host(), host) {
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		return false
	}
	win, ok := t.Lookup(host)
	if ok {
		fmt.Fprintf(w, "%s: Available, VIP %s and %s, ports %s\n", host, win.IPv4(), win.IPv6(), PortsText(win.Ports()))
		if len(win.Targets()) > 0 {
			for _, tg := range win.Targets() {
				fmt.Fprintf(w, "  port %d:\n", tg.Port)
				explainOrigin(w, "    ", tg.Origin, tg.Selector, tg.Tags, tg.Key)
			}
		} else {
			explainOrigin(w, "  ", win.Origin(), win.Selector(), win.Tags(), win.Key())
		}
	} else {
		fmt.Fprintf(w, "%s: NotAvailable\n", host)
	}
	for _, e := range es {
		if e == win {
			continue
		}
		if ok {
			fmt.Fprintf(w, "  beat %s/%s (%s) on port %s:\n", e.Origin().Kind, e.Origin().Name, e.Key(), PortsText(e.Ports()))
		} else {
			fmt.Fprintf(w, "  %s/%s (%s) on port %s:\n", e.Origin().Kind, e.Origin().Name, e.Key(), PortsText(e.Ports()))
		}
		explainOrigin(w, "    ", e.Origin(), e.Selector(), e.Tags(), e.Key())
		fmt.Fprintf(w, "    NotAvailable: %s\n", e.Reason())
	}
	return true
}

func explainOrigin(w io.Writer, indent string, o Origin, sel, tags mesh.Tags, key string) {
	switch o.Kind {
	case OriginService:
		fmt.Fprintf(w, "%sproduced by the default name of service %q (switch off with --no-default-vips)\n", indent, o.Name)
	default:
		fmt.Fprintf(w, "%sproduced by %s %q\n", indent, o.Kind, o.Name)
	}
	if sel != nil {
		fmt.Fprintf(w, "%sselector: %s\n", indent, sel.String())
	}
	fmt.Fprintf(w, "%stuple:    %s\n%skey:      %s\n", indent, tags.String(), indent, key)
}

// PortsText is ports as the vips table writes them: 80,8080.
func PortsText(ps []uint32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ",")
}
