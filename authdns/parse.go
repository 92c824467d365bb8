package authdns

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/miekg/dns"
)

// MaxZoneBytes is the largest master file ParseZone reads: 64 MiB, several times a zone of
// 100,000 user names (about 80 bytes each).
const MaxZoneBytes = 64 << 20

// ParseZone reads a zone in master-file form (as WriteZone writes it) back into a Zone that
// answers exactly as the zone it was written from: the way a zone built by the control plane
// reaches the agents' resolvers. The SOA must be the first record, at origin. It refuses
// $GENERATE and $INCLUDE (WriteZone writes neither: a line of either could cost any memory or
// read any file) and a text over MaxZoneBytes.
func ParseZone(origin string, r io.Reader) (*Zone, error) {
	origin = strings.ToLower(dns.Fqdn(origin))
	text, err := io.ReadAll(io.LimitReader(r, MaxZoneBytes+1))
	if err != nil {
		return nil, fmt.Errorf("zone %s: %w", origin, err)
	}
	if len(text) > MaxZoneBytes {
		return nil, fmt.Errorf("zone %s: over %d bytes, the most a zone may hold", origin, MaxZoneBytes)
	}
	if err := refuseDirectives(origin, text); err != nil {
		return nil, err
	}
	zp := dns.NewZoneParser(bytes.NewReader(text), origin, "")
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
		c.zones[z.Origin] = z
	}
	c.prepare()
	return c
}

// refuseDirectives names the first $GENERATE or $INCLUDE of text: a directive is a line's
// first word, at its very start.
func refuseDirectives(origin string, text []byte) error {
	for n, line := 1, text; len(line) > 0; n++ {
		end := bytes.IndexByte(line, '\n')
		if end < 0 {
			end = len(line)
		}
		if line[0] == '$' {
			word, _, _ := bytes.Cut(line[:end], []byte(" "))
			word, _, _ = bytes.Cut(word, []byte("\t"))
			if d := strings.ToUpper(strings.TrimSpace(string(word))); d == "$GENERATE" || d == "$INCLUDE" {
				return fmt.Errorf("zone %s: line %d: %s is refused (a zone's records are listed one by one)", origin, n, d)
			}
		}
		line = line[min(end+1, len(line)):]
	}
	return nil
}
