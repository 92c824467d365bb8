package authdns

import (
	"strings"

	"github.com/miekg/dns"
)

// keepWildcardAnswers gives every empty non-terminal of a router's zone that a wildcard
// answered before names were added below it the records that wildcard gives: a user name
// added under a name the shard serves (a.shop-www.shard.example.com under the shard's
// *.shard.example.com, which answers shop/www's system name shop-www) makes the names
// between them exist, empty, and an existing name is never answered by a wildcard (RFC 4592
// 2.2.2) - it would answer NOERROR with no data, taking the name from the route the
// wildcard served it for. The wildcard is the one of the closest ancestor that has one,
// looking up through empty non-terminals only (a name with records of its own closes the
// search, as it would close a wildcard's). A users' zone is left as built: there the
// routers' admission keeps other namespaces' names from under a wildcard.
func (z *Zone) keepWildcardAnswers() {
	if z.Router == "" {
		return
	}
	var empty []string
	for name, n := range z.nodes {
		if len(n.sets) == 0 && !strings.HasPrefix(name, "*.") {
			empty = append(empty, name)
		}
	}
	// Every wildcard is found before any name is filled: a name filled first would otherwise
	// look like a name with records of its own and close the search for the names below it
	// (which depended on the map's order).
	above := make([]*node, len(empty))
	for i, name := range empty {
		above[i] = z.wildcardAbove(name)
	}
	for i, name := range empty {
		w := above[i]
		if w == nil {
			continue
		}
		n := z.nodes[name]
		for t, rrs := range w.sets {
			for _, rr := range rrs {
				c := dns.Copy(rr)
				c.Header().Name = name
				n.sets[t] = append(n.sets[t], c)
			}
		}
	}
}

// wildcardAbove is the wildcard node that would answer name had it not existed, or nil.
func (z *Zone) wildcardAbove(name string) *node {
	for a := parent(name); a != "" && dns.IsSubDomain(z.Origin, a); a = parent(a) {
		if w := z.nodes["*."+a]; w != nil && len(w.sets) > 0 {
			return w
		}
		if n := z.nodes[a]; a == z.Origin || n != nil && len(n.sets) > 0 {
			return nil
		}
	}
	return nil
}
