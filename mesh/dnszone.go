package mesh

import (
	"errors"
	"slices"
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

// DerivedKinds are the kinds only the control plane builds: its zones (DNSZone), made from
// the routers, their ready replicas and the admitted routes. Decode refuses them wherever
// users write resources (files, the store, the API); an agent takes them from its control
// plane's link alone (DecodeFromControlPlane). A zone written by a user would otherwise be
// parsed by every agent's resolver, and take over any name.
var DerivedKinds = []string{KindDNSZone}

// DecodeFromControlPlane is Decode for the documents a control plane sends over its link:
// the derived kinds (DerivedKinds) are accepted too.
func DecodeFromControlPlane(source string, data []byte) ([]Resource, error) {
	return decodeAll(source, data)
}

// refuseDerived takes the resources of a derived kind out of a decode's result, each with
// an error naming it.
func refuseDerived(rs []Resource, err error) ([]Resource, error) {
	var errs Errors
	out := rs[:0]
	for _, r := range rs {
		if !slices.Contains(DerivedKinds, r.Kind()) {
			out = append(out, r)
			continue
		}
		errs = append(errs, &FieldError{Source: r.GetMeta().Source.String(), Kind: r.Kind(), Name: r.GetMeta().Name,
			Path: "type", Value: r.Kind(),
			Msg: "a " + r.Kind() + " is built by the control plane from its routers and sent over its link; it is never read from files, the store or the API"})
	}
	if len(errs) == 0 {
		return out, err
	}
	var prior Errors
	if err != nil && !errors.As(err, &prior) {
		return out, errors.Join(err, errs)
	}
	return out, append(prior, errs...)
}
