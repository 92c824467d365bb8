package shardzones

import (
	"bytes"
	"log/slog"
	"strings"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Docs are the catalog's zones as the agents receive them: one DNSZone per zone (named by
// its origin, for every mesh) holding the zone in master-file form, serial included, so an
// agent's resolver answers exactly as the control plane's DNS. A zone that cannot be encoded
// is left out and reported.
func Docs(cat *authdns.Catalog) ([]fanout.Doc, []error) {
	var docs []fanout.Doc
	var errs []error
	for _, z := range cat.Zones() {
		var b bytes.Buffer
		if err := authdns.WriteZone(&b, z); err != nil {
			errs = append(errs, err)
			continue
		}
		origin := strings.TrimSuffix(z.Origin, ".")
		r := &mesh.DNSZone{Meta: mesh.Meta{Name: origin}, Origin: origin, Zone: b.String()}
		body, err := cplink.EncodeResource(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		docs = append(docs, fanout.Doc{Kind: mesh.KindDNSZone, Name: origin, Meshless: true, Body: body, Source: "control plane zone " + origin})
	}
	return docs, errs
}

// FeedSink is a Sink that serves the catalog's zones to the agents through feed.
func FeedSink(feed *fanout.Feed, log *slog.Logger) Sink {
	return func(cat *authdns.Catalog) {
		docs, errs := Docs(cat)
		for _, err := range errs {
			log.Warn("a zone is not sent to agents", "error", err)
		}
		feed.SetDerived(mesh.KindDNSZone, docs)
	}
}
