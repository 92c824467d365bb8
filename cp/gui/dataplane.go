package gui

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
	"github.com/kumadp/kuma-dp/xds"
)

// A dataplane's page: its inbounds, tags and gateway, whether its agent is connected, the
// hostnames and VIPs it serves (with each name's --explain story) and a summary of the
// Envoy resources it would get (their JSON on demand, envoy.json).

// vipPageSize is the VIP table's rows a page shows.
const vipPageSize = 100

type inboundRow struct {
	Port, ServicePort, Address, Tags, State string
}

// outboundRow is one of the dataplane's own outbounds (networking.outbound).
type outboundRow struct {
	Address, Port, To, Hostname string
}

// vipRow is one row of the VIP table: as `kuma-dp vips` prints it, and its explain story.
type vipRow struct {
	Hostname, IPv4, IPv6, Ports, Origin, Status, Detail, Explain string
	Available                                                    bool
}

type dataplaneData struct {
	Name, Mesh, Address, Status, Replicas, YAML, Gateway string
	Online                                               bool
	Inbounds                                             []inboundRow
	Outbounds                                            []outboundRow
	VIPs                                                 []vipRow
	VIPTotal, VIPFirst                                   int
	VIPNext, VIPPrev                                     string
	Host                                                 string
	Skipped                                              []string
	Problems                                             []string
	Envoy                                                envoySummary
	EnvoyJSON                                            string
}

func (s *Server) dataplane(ctx context.Context, r *http.Request) (string, string, any, error) {
	meshName, name := r.PathValue("mesh"), r.PathValue("name")
	first, err := vipPage(r)
	if err != nil {
		return "", meshName, nil, err
	}
	res, err := s.api.Get(ctx, meshName, "dataplanes", name)
	if err != nil {
		return "", meshName, nil, err
	}
	v, err := s.viewOf(ctx, meshName, name, xds.Options{})
	if err != nil {
		return "", meshName, nil, err
	}
	agents, err := s.api.Agents(ctx)
	if err != nil {
		return "", meshName, nil, err
	}
	d := dataplaneData{Name: name, Mesh: meshName, Status: "Offline", Problems: v.Problems,
		EnvoyJSON: pathOf("meshes", meshName, "dataplanes", name, "envoy.json"), YAML: specYAML("Dataplane", res.Spec)}
	_, d.Address = api.DataplaneColumns(res)
	for _, a := range agents {
		if a.Mesh == meshName && a.Name == name {
			d.Status, d.Online, d.Replicas = "Online", true, strings.Join(a.Replicas, ", ")
		}
	}
	d.networking(v.Self.Networking)
	d.vips(r, v.Table, first)
	d.Envoy = summarize(v.Envoy, v.EnvoyErr)
	return "Dataplane " + name, meshName, d, nil
}

// networking fills the inbounds, outbounds and gateway.
func (d *dataplaneData) networking(n mesh.Networking) {
	for _, in := range n.Inbound {
		row := inboundRow{Port: strconv.Itoa(int(in.Port)), Address: in.Address(), Tags: in.Tags.String(), State: in.State()}
		if row.State == "" {
			row.State = "Ready"
		}
		if in.ServicePort != 0 {
			row.ServicePort = strconv.Itoa(int(in.ServicePort))
		}
		d.Inbounds = append(d.Inbounds, row)
	}
	ne := n.NetworkingExtra
	if ne == nil {
		return
	}
	if len(ne.Gateway) > 0 {
		d.Gateway = string(ne.Gateway)
	}
	for _, o := range ne.Outbound {
		row := outboundRow{Address: o.Address, Port: strconv.Itoa(int(o.Port)), To: o.Tags.String(), Hostname: o.Hostname}
		if row.Address == "" {
			row.Address = "127.0.0.1"
		}
		if o.BackendRef != nil {
			row.To = o.BackendRef.Kind + "/" + o.BackendRef.Name
		}
		d.Outbounds = append(d.Outbounds, row)
	}
}

// vips fills the VIP table's page from first (the query's host filtering it), its links
// and the tuples without a hostname.
func (d *dataplaneData) vips(r *http.Request, t *vipalloc.Table, first int) {
	d.Host = r.URL.Query().Get("host")
	d.VIPs, d.VIPTotal = vipRows(t, d.Host, first)
	d.VIPFirst = first + 1
	link := func(from int) string {
		q := r.URL.Query()
		q.Set("vfrom", strconv.Itoa(from))
		return pathOf("meshes", d.Mesh, "dataplanes", d.Name) + "?" + q.Encode() + "#vips"
	}
	if first+vipPageSize < d.VIPTotal {
		d.VIPNext = link(first + vipPageSize)
	}
	if first > 0 {
		d.VIPPrev = link(max(0, first-vipPageSize))
	}
	for _, sk := range t.Skipped() {
		d.Skipped = append(d.Skipped, sk.Origin.Kind+"/"+sk.Origin.Name+" "+sk.Key+": "+sk.Reason)
	}
}

// vipPage is the VIP table's first row shown (vfrom, from 0).
func vipPage(r *http.Request) (int, error) {
	v := r.URL.Query().Get("vfrom")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badRequest("vfrom %q: want a whole number from 0", v)
	}
	return n, nil
}

// vipRows are the rows of t's entries whose hostname contains host, from first, at most
// vipPageSize, and how many there are: each as `kuma-dp vips` writes it, with its story.
func vipRows(t *vipalloc.Table, host string, first int) ([]vipRow, int) {
	var match []*vipalloc.Entry
	for _, e := range t.Entries() {
		if strings.Contains(e.Hostname, strings.ToLower(host)) {
			match = append(match, e)
		}
	}
	var out []vipRow
	explained := map[string]string{}
	for _, e := range match[min(first, len(match)):min(first+vipPageSize, len(match))] {
		row := vipRow{Hostname: e.Hostname, IPv4: "-", IPv6: "-", Ports: vipalloc.PortsText(e.Ports()),
			Origin: e.Origin().Kind + "/" + e.Origin().Name, Status: e.Status.String(), Available: e.Status == vipalloc.Available, Detail: e.Tags().String()}
		if e.IPv4().IsValid() {
			row.IPv4 = e.IPv4().String()
			if e.IPv6().IsValid() {
				row.IPv6 = e.IPv6().String()
			}
		}
		if !row.Available {
			row.Detail = e.Reason()
		}
		story, ok := explained[e.Hostname]
		if !ok {
			var b strings.Builder
			t.Explain(&b, e.Hostname)
			story = b.String()
			explained[e.Hostname] = story
		}
		row.Explain = story
		out = append(out, row)
	}
	return out, len(match)
}

// specYAML is a resource's document as YAML, with every inline secret hidden; its type
// first (the API's document of a resource applied by kuma-cp apply has none).
func specYAML(kind string, spec json.RawMessage) string {
	var text string
	if json.Unmarshal(spec, &text) == nil {
		// a document stored as YAML text (an unquoted {{ name }} template): read as it is,
		// so that its secrets are hidden too
		j, err := mesh.DocumentJSON([]byte(text))
		if err != nil {
			return "(a document that does not read: " + err.Error() + ")"
		}
		spec = j
	}
	var doc map[string]any
	if json.Unmarshal(spec, &doc) != nil {
		return string(spec)
	}
	typ := ""
	if _, ok := doc["type"]; !ok {
		typ = "type: " + kind + "\n"
	}
	return typ + toYAML(hideSecrets(doc))
}

// secretKeys are the fields that hold key material inline (a DataSource's inline and
// inlineString): never shown.
var secretKeys = []string{"inline", "inlineString"}

// hideSecrets replaces the values of secretKeys anywhere in doc.
func hideSecrets(doc any) any {
	switch v := doc.(type) {
	case map[string]any:
		for k, x := range v {
			if slices.Contains(secretKeys, k) {
				v[k] = "(hidden)"
				continue
			}
			v[k] = hideSecrets(x)
		}
	case []any:
		for i, x := range v {
			v[i] = hideSecrets(x)
		}
	}
	return doc
}

// envoyJSON is the Envoy resources the dataplane would get, as JSON (protojson): listeners,
// clusters and endpoints. Secrets are left out.
func (s *Server) envoyJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	meshName, name := r.PathValue("mesh"), r.PathValue("name")
	v, err := s.viewOf(ctx, meshName, name, xds.Options{})
	if err == nil {
		err = v.EnvoyErr
	}
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	b, err := envoyDocument(v.Envoy)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}
