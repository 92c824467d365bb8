package mesh

import (
	"strings"

	"github.com/kumadp/kuma-dp/internal/errtext"
)

// KindDNSZone names a zone of the control plane's authoritative DNS for router shards.
const KindDNSZone = "DNSZone"

// DNSZone is one zone of the control plane's authoritative DNS (a router shard's zone, or a
// users' domain holding CNAMEs to shards), as the control plane built it from the routers,
// their ready replicas and the admitted routes. It is derived, never written by users: the
// control plane sends it to agents so their resolvers answer route names exactly as its DNS
// does. It applies to every mesh (the control plane's DNS is one namespace).
type DNSZone struct {
	Meta
	// Origin is the zone's apex, lower case, without the trailing dot.
	Origin string `json:"origin"`
	// Zone is the zone in RFC 1035 master-file form ($ORIGIN, $TTL, the SOA first).
	Zone string `json:"zone"`
	// Partial: a users' domain that every mesh shares, holding only the names of the mesh it
	// is sent to; a name it does not hold (NXDOMAIN here) is another mesh's or nobody's, and
	// the agent asks upstream for it.
	Partial bool `json:"partial,omitempty"`
}

func (*DNSZone) Kind() string { return KindDNSZone }

func (v *validator) dnsZone(z *DNSZone) {
	if err := CheckDNSName(strings.TrimSuffix(z.Origin, ".")); err != nil {
		v.errorf("origin", z.Origin, "%v", err)
	}
	if !strings.Contains(z.Zone, " SOA ") && !strings.Contains(z.Zone, "\tSOA\t") {
		v.errorf("zone", errtext.Clip(z.Zone, 80), "not a zone in master-file form: no SOA record")
	}
}
