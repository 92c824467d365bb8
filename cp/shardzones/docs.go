package shardzones

import (
	"bytes"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Docs are each mesh's zones as its agents receive them: one DNSZone per zone (named by its
// origin, served to that mesh's agents only) holding the zone in master-file form, serial
// included, so an agent's resolver answers its mesh's route names exactly as the control
// plane's DNS. A users' zone is marked partial: it holds this mesh's names only, and the
// agent asks upstream for a name it does not hold. A zone that cannot be encoded is left
// out and reported.
func Docs(meshes map[string]*authdns.Catalog) ([]fanout.Doc, []error) {
	var docs []fanout.Doc
	var errs []error
	for _, m := range slices.Sorted(maps.Keys(meshes)) {
		for _, z := range meshes[m].Zones() {
			var b bytes.Buffer
			if err := authdns.WriteZone(&b, z); err != nil {
				errs = append(errs, err)
				continue
			}
			origin := strings.TrimSuffix(z.Origin, ".")
			r := &mesh.DNSZone{Meta: mesh.Meta{Name: origin}, Origin: origin, Zone: b.String(), Partial: z.Router == ""}
			body, err := cplink.EncodeResource(r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			docs = append(docs, fanout.Doc{Kind: mesh.KindDNSZone, Mesh: m, Name: origin, Body: body, Source: "control plane zone " + origin + " of mesh " + m})
		}
	}
	return docs, errs
}

// FeedSink is a Sink that serves each mesh's zones to that mesh's agents through feed.
func FeedSink(feed *fanout.Feed, log *slog.Logger) Sink {
	return func(z *Zones) {
		docs, errs := Docs(z.Meshes)
		for _, err := range errs {
			log.Warn("a zone is not sent to agents", "error", err)
		}
		feed.SetDerived(mesh.KindDNSZone, docs)
	}
}
