package api

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/mesh"
)

// DescribeMeshExternalService is `describe meshexternalservice NAME`: its labels as the
// agents read them (Kuma's kuma.io/origin, kuma.io/mesh and kuma.io/env stamped where not
// written) and, for each HostnameGenerator of its mesh (and those for every mesh), the
// hostname it gives the service or why it selects nothing. Each agent allocates the VIP.
func DescribeMeshExternalService(w io.Writer, r Resource, generators []Resource) error {
	mess := decodeAs[*mesh.MeshExternalService]([]Resource{r})
	if len(mess) == 0 {
		return fmt.Errorf("meshexternalservice %s does not decode", r.Name)
	}
	es := mess[0]
	keys := make([]string, 0, len(es.Labels()))
	for k := range es.Labels() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	labels := make([]string, len(keys))
	for i, k := range keys {
		labels[i] = k + "=" + es.Labels()[k]
	}
	fmt.Fprintf(w, "Name:             %s\nMesh:             %s\nLabels:           %s\nPort:             %d (%s)\n",
		es.Name, es.Mesh, strings.Join(labels, ","), es.Spec.Match.Port, es.Spec.Match.Protocol)
	if _, ignored := es.Labels()[mesh.IgnoreLabel]; ignored {
		fmt.Fprintf(w, "Hostnames:        none: ignored (label %s)\n", mesh.IgnoreLabel)
		return nil
	}
	gens := decodeAs[*mesh.HostnameGenerator](generators)
	named := 0
	fmt.Fprintf(w, "Generators:       %d\n", len(gens))
	for _, hg := range gens {
		if hg.Mesh != "" && hg.Mesh != es.Mesh || hg.Labels()[mesh.MeshLabel] != "" && hg.Labels()[mesh.MeshLabel] != es.Mesh {
			continue // another mesh's
		}
		if ok, why := hg.Spec.TargetRef.SelectsMES(es.Labels()); !ok {
			fmt.Fprintf(w, "  %s\tselects nothing here: %s\n", hg.Name, why)
			continue
		}
		tpl, err := hostname.CompileHostnameGenerator(hg.Spec.Template)
		if err != nil {
			fmt.Fprintf(w, "  %s\tselects it, no hostname: %v\n", hg.Name, err)
			continue
		}
		data := hostname.HGData{Name: es.Name, DisplayName: es.Name, Mesh: es.Mesh, Zone: es.Labels()[mesh.ZoneTag],
			Namespace: es.Labels()[mesh.NamespaceLabel], Labels: es.Labels()}
		if dn := es.Labels()["kuma.io/display-name"]; dn != "" {
			data.DisplayName = dn
		}
		host, err := tpl.Render(data)
		if err != nil {
			fmt.Fprintf(w, "  %s\tselects it, no hostname: %v\n", hg.Name, err)
			continue
		}
		named++
		fmt.Fprintf(w, "  %s\t%s\n", hg.Name, host)
	}
	if named == 0 {
		fmt.Fprintln(w, "Hostnames:        none: no generator names it (agents give it a VIP and no hostname)")
	}
	return nil
}
