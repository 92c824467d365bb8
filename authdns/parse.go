package authdns

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// ParseZone reads a zone in master-file form (as WriteZone writes it) back into a Zone that
// answers exactly as the zone it was written from: the way a zone built by the control plane
// reaches the agents' resolvers. The SOA must be the first record, at origin.
func ParseZone(origin string, r io.Reader) (*Zone, error) {
	origin = strings.ToLower(dns.Fqdn(origin))
	zp := dns.NewZoneParser(r, origin, "")
	var z *Zone
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if z == nil {
			soa, isSOA := rr.(*dns.SOA)
			if !isSOA || !strings.EqualFold(soa.Hdr.Name, origin) {
				return nil, fmt.Errorf("zone %s: the first record must be its SOA, got %s", origin, rr.String())
			}
			soa.Hdr.Name = origin
			z = &Zone{Origin: origin, TTL: soa.Hdr.Ttl, SOA: soa, nodes: map[string]*node{}}
			z.add(soa)
			continue
		}
		if !dns.IsSubDomain(origin, strings.ToLower(rr.Header().Name)) {
			return nil, fmt.Errorf("zone %s: record %s is outside the zone", origin, rr.String())
		}
		if _, dup := rr.(*dns.SOA); dup {
			return nil, fmt.Errorf("zone %s: a second SOA record: %s", origin, rr.String())
		}
		z.add(rr)
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("zone %s: %w", origin, err)
	}
	if z == nil {
		return nil, fmt.Errorf("zone %s: no SOA record", origin)
	}
	return z, nil
}

// NewCatalog is the catalog of these zones; a later zone of an origin already given
// replaces the earlier one.
func NewCatalog(zones ...*Zone) *Catalog {
	c := &Catalog{zones: make(map[string]*Zone, len(zones))}
	for _, z := range zones {
		if _, dup := c.zones[z.Origin]; !dup {
			c.origins = append(c.origins, z.Origin)
		}
		c.zones[z.Origin] = z
	}
	slices.SortFunc(c.origins, func(a, b string) int {
		return cmp.Or(cmp.Compare(dns.CountLabel(b), dns.CountLabel(a)), cmp.Compare(a, b))
	})
	c.prepare()
	return c
}
