package gui

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/mesh"
)

// A mesh's router shards: each router with its DNS name, selectors, replicas (ready or not,
// and why) and routes; each route's status, final DNS name, CNAME target for a user's name
// and admission (or the condition that refused it, and the route holding its host). A
// picture draws the shards side by side. What the API returns of a router's own status is
// shown as it is, whatever fields it has.

type replicaRow struct {
	Name, Address, Reason string
	Ready                 bool
}

type routeRow struct {
	Namespace, Name, Host, DNSType, Router, Phase, DNS, CNAME, Admission, Holder string
	Admitted, Refused                                                            bool
}

type routerView struct {
	Name, DNS, Selector, Namespaces, Description string
	Status                                       []field
	Replicas                                     []replicaRow
	Ready                                        int
	// MoreReplicas are the replicas beyond the page's (api.MaxPageSize), not listed.
	MoreReplicas int
	Routes       []routeRow
}

type routersData struct {
	Routers     []routerView
	Unscheduled []routeRow
	Picture     picture
}

func (s *Server) routers(ctx context.Context, r *http.Request) (string, string, any, error) {
	meshName := r.PathValue("mesh")
	routerRes, err := s.api.List(ctx, meshName, "routers")
	if err != nil {
		return "", meshName, nil, err
	}
	routeRes, err := s.api.List(ctx, meshName, "routes")
	if err != nil {
		return "", meshName, nil, err
	}
	routes := routeRows(routeRes)
	var d routersData
	for _, res := range routerRes {
		x, err := decoded(res)
		rt, ok := x.(*mesh.Router)
		if err != nil || !ok {
			continue
		}
		v := routerView{Name: rt.Name, DNS: rt.DNS, Description: rt.Description, Selector: cmp.Or(mesh.LabelsText(rt.RouteSelector), "<all>"),
			Namespaces: strings.Join(rt.NamespaceSelector, ", "), Status: statusFields(res.Spec)}
		if v.Namespaces == "" {
			v.Namespaces = "<all>"
		}
		total := 0
		if v.Replicas, total, err = s.replicasOf(ctx, meshName, rt); err != nil {
			return "", meshName, nil, err
		}
		v.MoreReplicas = total - len(v.Replicas)
		for _, rep := range v.Replicas {
			if rep.Ready {
				v.Ready++
			}
		}
		for _, rr := range routes {
			if rr.Router == rt.Name {
				v.Routes = append(v.Routes, rr)
			}
		}
		d.Routers = append(d.Routers, v)
	}
	for _, rr := range routes {
		if rr.Router == "" || !slices.ContainsFunc(d.Routers, func(v routerView) bool { return v.Name == rr.Router }) {
			d.Unscheduled = append(d.Unscheduled, rr)
		}
	}
	d.Picture = draw(d.Routers, d.Unscheduled)
	return "Router shards of " + meshName, meshName, d, nil
}

// replicasOf are a router's replicas and whether each is ready, with the reason when not, as
// the router's status says (the control plane writes it; its DNS serves the same). Before
// the status is written: its gateway dataplanes (an inbound with every tag of its
// dataplanes selector, through the API's filter; at most api.MaxPageSize, of total), ready
// when the agent is connected and the inbound neither NotReady nor unhealthy.
func (s *Server) replicasOf(ctx context.Context, meshName string, rt *mesh.Router) (rows []replicaRow, total int, err error) {
	if st := rt.Status; st != nil { // the control plane's: what its DNS serves (routerstatus)
		for _, r := range st.Replicas {
			row := replicaRow{Name: r.Name, Address: r.Address, Ready: r.Ready}
			if !r.Ready {
				row.Reason = r.Reason + ": " + r.Message
			}
			rows = append(rows, row)
		}
		return rows, len(rows), nil
	}
	if len(rt.Dataplanes) == 0 {
		return nil, 0, nil
	}
	q := url.Values{"size": {strconv.Itoa(api.MaxPageSize)}}
	for _, t := range rt.Dataplanes {
		q.Add("tag", t.Key+":"+t.Value)
	}
	page, err := s.api.DataplaneOverviews(ctx, meshName, q)
	if err != nil {
		return nil, 0, err
	}
	for _, it := range page.Items {
		row := replicaRow{Name: it.Name, Ready: true}
		_, row.Address = api.DataplaneColumns(it.Resource)
		var reasons []string
		if it.Insight.Status != "Online" {
			reasons = append(reasons, "its agent is not connected")
		}
		if x, err := decoded(it.Resource); err == nil {
			if dp, ok := x.(*mesh.Dataplane); ok {
				for _, in := range dp.Networking.Inbound {
					if !rt.Dataplanes.Matches(in.Tags) {
						continue
					}
					if in.State() == mesh.InboundNotReady {
						reasons = append(reasons, "inbound "+strconv.Itoa(int(in.Port))+" is NotReady")
					}
					if h := in.Health(); h != nil && !h.Ready {
						reasons = append(reasons, "inbound "+strconv.Itoa(int(in.Port))+" is unhealthy")
					}
				}
			}
		}
		if len(reasons) > 0 {
			row.Ready, row.Reason = false, strings.Join(reasons, "; ")
		}
		rows = append(rows, row)
	}
	return rows, page.Total, nil
}

// routeRows are the routes as the page lists them, with the route holding the host of each
// one refused.
func routeRows(res []api.Resource) []routeRow {
	var routes []*mesh.Route
	for _, r := range res {
		if x, err := decoded(r); err == nil {
			if rt, ok := x.(*mesh.Route); ok {
				routes = append(routes, rt)
			}
		}
	}
	holder := map[string]string{} // host -> the admitted route's namespace/name
	for _, r := range routes {
		if r.Admitted() {
			holder[strings.ToLower(r.Host)] = r.Namespace + "/" + r.Name
		}
	}
	var out []routeRow
	for _, r := range routes {
		row := routeRow{Namespace: r.Namespace, Name: r.Name, Host: r.Host + r.Path, DNSType: r.DNSTypeOf(), Phase: r.PhaseOf(), Admitted: r.Admitted()}
		if st := r.Status; st != nil {
			row.Router, row.DNS = st.Router, st.DNS
			if r.DNSTypeOf() == mesh.DNSTypeUser {
				row.CNAME = st.RouterCanonicalHostname
			}
			row.Admission = admission(r)
			if st.Router == "" && st.Reason != "" {
				row.Admission = "not scheduled: " + st.Reason + ": " + st.Message
			}
		}
		if row.Admission == "" {
			row.Admission = "-"
		}
		if !row.Admitted && row.Router != "" {
			row.Refused = true
			if h := holder[strings.ToLower(r.Host)]; h != "" && h != r.Namespace+"/"+r.Name {
				row.Holder = h
			}
		}
		out = append(out, row)
	}
	return out
}

// admission is the route's Admitted condition on its router: "Admitted", or the refusing
// condition's reason and message.
func admission(r *mesh.Route) string {
	for _, ing := range r.Status.Ingress {
		if ing.Router != r.Status.Router {
			continue
		}
		for _, c := range ing.Conditions {
			if c.Type != "Admitted" {
				continue
			}
			if c.Status == "True" {
				return "Admitted"
			}
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

// statusFields is a resource's status block as the API returns it, field by field (none
// when it has none).
func statusFields(spec json.RawMessage) []field {
	var doc struct {
		Status map[string]any `json:"status"`
	}
	if json.Unmarshal(spec, &doc) != nil || len(doc.Status) == 0 {
		return nil
	}
	return fields(doc.Status)
}
