package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// The read endpoints the GUI (and scripts) need beyond the resources themselves, in Kuma's
// shape: GET /mesh-insights (each mesh's counts), GET /meshes/{mesh}/dataplanes+insights
// (dataplanes with their agent's status, filtered and paged) and GET /zones (the router
// shards' zones as served).

// scanPage is how many resources a server-side scan reads from the store at once: the scan
// holds one page, never a whole list.
const scanPage = 2000

// Total is a count, as Kuma's insights write it.
type Total struct {
	Total int `json:"total"`
}

// DataplaneCounts are a mesh's dataplanes by their agent's status.
type DataplaneCounts struct {
	Total   int `json:"total"`
	Online  int `json:"online"`
	Offline int `json:"offline"`
}

// MeshInsight is one mesh's counts (Kuma's MeshInsight): dataplanes online and offline,
// services (kuma.io/service values of the inbounds), policies by kind, routers and routes.
type MeshInsight struct {
	Type       string           `json:"type"`
	Name       string           `json:"name"`
	Dataplanes DataplaneCounts  `json:"dataplanes"`
	Services   Total            `json:"services"`
	Policies   map[string]Total `json:"policies"`
	Routers    Total            `json:"routers"`
	Routes     Total            `json:"routes"`
}

// MeshInsights is GET /mesh-insights.
type MeshInsights struct {
	Total int           `json:"total"`
	Items []MeshInsight `json:"items"`
}

// PolicyKinds are the kinds a mesh insight counts by kind (its "policies"): every kind of
// the API but dataplanes and router shards, in the order the GUI lists them.
var PolicyKinds = []string{mesh.KindVirtualOutbound, mesh.KindTrafficRoute, mesh.KindMeshExternalService, mesh.KindHostnameGenerator,
	mesh.KindMeshService, mesh.KindMeshTCPRoute, mesh.KindMeshHTTPRoute}

// scan calls f with every resource of a list, a page of the store at a time.
func scan(ctx context.Context, st store.Store, meshName, kind string, f func(store.Item)) error {
	after := ""
	for {
		items, next, _, err := st.List(ctx, meshName, kind, after, scanPage)
		if err != nil {
			return err
		}
		for _, it := range items {
			f(it)
		}
		if next == "" {
			return nil
		}
		after = next
	}
}

// decodeDataplane is a stored dataplane decoded (nil when it does not decode).
func decodeDataplane(it store.Item) *mesh.Dataplane {
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	if err != nil || len(rs) != 1 {
		return nil
	}
	dp, _ := rs[0].(*mesh.Dataplane)
	return dp
}

// online is the agents connected now, by "mesh/name", with their replicas.
func (s *Server) online() map[string][]string {
	out := map[string][]string{}
	if s.Agents == nil {
		return out
	}
	for _, a := range s.Agents() {
		out[a.Mesh+"/"+a.Name] = a.Replicas
	}
	return out
}

func (s *Server) meshInsights(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	byMesh := map[string]*MeshInsight{}
	at := func(name string) *MeshInsight {
		mi := byMesh[name]
		if mi == nil {
			mi = &MeshInsight{Type: "MeshInsight", Name: name, Policies: map[string]Total{}}
			byMesh[name] = mi
		}
		return mi
	}
	on := s.online()
	services := map[string]map[string]bool{}
	err := scan(ctx, s.Store, "", mesh.KindDataplane, func(it store.Item) {
		mi := at(it.Mesh)
		mi.Dataplanes.Total++
		if _, ok := on[it.Mesh+"/"+it.Name]; ok {
			mi.Dataplanes.Online++
		} else {
			mi.Dataplanes.Offline++
		}
		if dp := decodeDataplane(it); dp != nil {
			for _, tags := range tagSets(dp) {
				if svc := tags[mesh.ServiceTag]; svc != "" {
					if services[it.Mesh] == nil {
						services[it.Mesh] = map[string]bool{}
					}
					services[it.Mesh][svc] = true
				}
			}
		}
	})
	for _, kind := range append(slices.Clone(PolicyKinds), mesh.KindRouter, mesh.KindRoute) {
		if err != nil {
			break
		}
		err = scan(ctx, s.Store, "", kind, func(it store.Item) {
			mi := at(it.Mesh)
			switch kind {
			case mesh.KindRouter:
				mi.Routers.Total++
			case mesh.KindRoute:
				mi.Routes.Total++
			default:
				mi.Policies[kind] = Total{mi.Policies[kind].Total + 1}
			}
		})
	}
	if err != nil {
		storeError(w, err)
		return
	}
	out := MeshInsights{Items: []MeshInsight{}}
	for name, mi := range byMesh {
		mi.Services.Total = len(services[name])
		out.Items = append(out.Items, *mi)
	}
	slices.SortFunc(out.Items, func(a, b MeshInsight) int { return strings.Compare(a.Name, b.Name) })
	out.Total = len(out.Items)
	writeJSON(w, http.StatusOK, out)
}

// DataplaneInsight is a dataplane's agent as the control plane sees it: Online while it
// holds a stream to a replica, and those replicas.
type DataplaneInsight struct {
	Status   string   `json:"status"`
	Replicas []string `json:"replicas,omitempty"`
}

// DataplaneOverview is one item of GET /meshes/{mesh}/dataplanes+insights (Kuma's
// DataplaneOverview): the dataplane as stored and its agent's insight.
type DataplaneOverview struct {
	Resource
	Insight DataplaneInsight `json:"dataplaneInsight"`
}

// DataplaneOverviews is a page of dataplanes+insights: Total counts every page's (the
// dataplanes matching the filters), Next is the next page's path ("" on the last).
type DataplaneOverviews struct {
	Total int                 `json:"total"`
	Items []DataplaneOverview `json:"items"`
	Next  string              `json:"next,omitempty"`
}

// DataplaneFilter selects dataplanes (the query of dataplanes+insights).
type DataplaneFilter struct {
	// Name: the dataplane's name contains it.
	Name string
	// Tags: an inbound (or the gateway) has every tag (key:value; a value "*" any value).
	Tags []mesh.Tag
	// Status: Online or Offline ("": both).
	Status string
	// Replica: its agent is connected to this replica.
	Replica string
	// Gateway: "true" only gateway dataplanes, "false" none ("": both).
	Gateway string
}

// DefaultPageSize and MaxPageSize bound a page of dataplanes+insights.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// parseDataplaneFilter reads the query: name, tag (repeatable, key:value as Kuma's),
// service (the tag kuma.io/service), status (online|offline), replica, gateway
// (true|false). A bad value is an error naming the parameter and the value.
func parseDataplaneFilter(q url.Values) (DataplaneFilter, error) {
	f := DataplaneFilter{Name: q.Get("name"), Replica: q.Get("replica")}
	for _, t := range q["tag"] {
		k, v, ok := strings.Cut(t, ":")
		if !ok || k == "" || v == "" {
			return f, fmt.Errorf("tag %q: want key:value (a value * for any)", t)
		}
		f.Tags = append(f.Tags, mesh.Tag{Key: k, Value: v})
	}
	if svc := q.Get("service"); svc != "" {
		f.Tags = append(f.Tags, mesh.Tag{Key: mesh.ServiceTag, Value: svc})
	}
	switch st := strings.ToLower(q.Get("status")); st {
	case "":
	case "online":
		f.Status = "Online"
	case "offline":
		f.Status = "Offline"
	default:
		return f, fmt.Errorf("status %q: want online or offline", q.Get("status"))
	}
	switch g := q.Get("gateway"); g {
	case "", "true", "false":
		f.Gateway = g
	default:
		return f, fmt.Errorf("gateway %q: want true or false", g)
	}
	return f, nil
}

// empty says the filter selects every dataplane: a page is then read as a page.
func (f DataplaneFilter) empty() bool {
	return f.Name == "" && len(f.Tags) == 0 && f.Status == "" && f.Replica == "" && f.Gateway == ""
}

// matches says whether a dataplane (decoded: dp, nil when it does not decode) and its
// insight are selected.
func (f DataplaneFilter) matches(it store.Item, dp *mesh.Dataplane, in DataplaneInsight) bool {
	if f.Name != "" && !strings.Contains(it.Name, f.Name) {
		return false
	}
	if (f.Status != "" && in.Status != f.Status) || (f.Replica != "" && !slices.Contains(in.Replicas, f.Replica)) {
		return false
	}
	if f.Gateway == "" && len(f.Tags) == 0 {
		return true
	}
	if dp == nil {
		return false
	}
	gw := dp.Networking.NetworkingExtra != nil && len(dp.Networking.Gateway) > 0
	if (f.Gateway == "true" && !gw) || (f.Gateway == "false" && gw) {
		return false
	}
	return len(f.Tags) == 0 || HasTags(dp, f.Tags)
}

// HasTags says whether an inbound of dp, or its gateway, has every tag (a value "*": any
// value): the API's tag filter, and what the GUI counts for a policy's selector.
func HasTags(dp *mesh.Dataplane, want []mesh.Tag) bool {
	for _, tags := range tagSets(dp) {
		all := true
		for _, t := range want {
			if v, ok := tags[t.Key]; !ok || (t.Value != mesh.Wildcard && v != t.Value) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// tagSets are a dataplane's tags: each inbound's, and its gateway's.
func tagSets(dp *mesh.Dataplane) []map[string]string {
	out := make([]map[string]string, 0, len(dp.Networking.Inbound)+1)
	for _, in := range dp.Networking.Inbound {
		out = append(out, in.Tags.Map())
	}
	if gw := gatewayTags(dp.Networking); gw != nil {
		out = append(out, gw)
	}
	return out
}

func insightOf(on map[string][]string, it store.Item) DataplaneInsight {
	if ids, ok := on[it.Mesh+"/"+it.Name]; ok {
		return DataplaneInsight{Status: "Online", Replicas: ids}
	}
	return DataplaneInsight{Status: "Offline"}
}

func (s *Server) dataplaneInsights(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := DefaultPageSize
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > MaxPageSize {
			fail(w, http.StatusBadRequest, "bad size", fmt.Sprintf("size %q: want a whole number from 1 to %d", v, MaxPageSize))
			return
		}
		size = n
	}
	f, err := parseDataplaneFilter(q)
	if err != nil {
		fail(w, http.StatusBadRequest, "bad filter", err.Error())
		return
	}
	meshName, after := r.PathValue("mesh"), q.Get("after")
	if meshName == "*" {
		meshName = ""
	}
	var out DataplaneOverviews
	if f.empty() {
		out, err = s.dataplanePage(r.Context(), meshName, after, size)
	} else {
		out, err = s.dataplaneScan(r.Context(), meshName, after, size, f)
	}
	if err != nil {
		storeError(w, err)
		return
	}
	if out.Next != "" {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("size", strconv.Itoa(size))
		nq.Set("after", out.Next)
		out.Next = r.URL.EscapedPath() + "?" + nq.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// dataplanePage is one page of a mesh's dataplanes, unfiltered: the store's page and count.
func (s *Server) dataplanePage(ctx context.Context, meshName, after string, size int) (DataplaneOverviews, error) {
	items, next, rev, err := s.Store.List(ctx, meshName, mesh.KindDataplane, after, size)
	if err != nil {
		return DataplaneOverviews{}, err
	}
	out := DataplaneOverviews{Items: make([]DataplaneOverview, 0, len(items)), Next: next, Total: len(items)}
	on := s.online()
	for _, it := range items {
		out.Items = append(out.Items, DataplaneOverview{Resource: toResource(it), Insight: insightOf(on, it)})
	}
	if after != "" || next != "" {
		out.Total, err = s.Store.Count(ctx, meshName, mesh.KindDataplane, rev)
	}
	return out, err
}

// dataplaneScan is one page of the dataplanes a filter selects: every dataplane is read (a
// store page at a time) to count them, the page's are kept.
func (s *Server) dataplaneScan(ctx context.Context, meshName, after string, size int, f DataplaneFilter) (DataplaneOverviews, error) {
	out := DataplaneOverviews{Items: []DataplaneOverview{}}
	on := s.online()
	err := scan(ctx, s.Store, meshName, mesh.KindDataplane, func(it store.Item) {
		var dp *mesh.Dataplane
		if len(f.Tags) > 0 || f.Gateway != "" {
			dp = decodeDataplane(it)
		}
		in := insightOf(on, it)
		if !f.matches(it, dp, in) {
			return
		}
		out.Total++
		key := it.Key.String()
		switch {
		case after != "" && key <= after:
		case len(out.Items) < size:
			out.Items = append(out.Items, DataplaneOverview{Resource: toResource(it), Insight: in})
		case out.Next == "":
			out.Next = out.Items[len(out.Items)-1].key()
		}
	})
	return out, err
}

func (r Resource) key() string {
	return store.Key{Mesh: r.Mesh, Type: Types[r.Type], Name: r.Name}.String()
}

// Zone is one zone as served: GET /zones and `kuma-cp zones -o json`.
type Zone struct {
	Origin  string   `json:"origin"`
	Serial  uint32   `json:"serial"`
	Records []string `json:"records"`
}

// ZonesOf is a catalog's zones as JSON shapes them.
func ZonesOf(cat *authdns.Catalog) []Zone {
	out := []Zone{}
	if cat == nil {
		return out
	}
	for _, z := range cat.Zones() {
		zz := Zone{Origin: z.Origin, Serial: z.Serial(), Records: []string{}}
		for _, rr := range z.Records() {
			zz.Records = append(zz.Records, rr.String())
		}
		out = append(out, zz)
	}
	return out
}

// Zones is GET /zones.
type Zones struct {
	Total int    `json:"total"`
	Items []Zone `json:"items"`
}

func (s *Server) zones(w http.ResponseWriter, _ *http.Request) {
	if s.Zones == nil {
		fail(w, http.StatusNotFound, "no zones", "this control plane serves no router shard DNS (--store etcd builds it)")
		return
	}
	items := ZonesOf(s.Zones())
	writeJSON(w, http.StatusOK, Zones{Total: len(items), Items: items})
}

// MeshInsights returns every mesh's counts (GET /mesh-insights).
func (c *Client) MeshInsights(ctx context.Context) ([]MeshInsight, error) {
	var l MeshInsights
	if _, err := c.do(ctx, http.MethodGet, "/mesh-insights", nil, 0, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DataplaneOverviews returns one page of a mesh's dataplanes with their insights; query is
// the filter and paging (name, tag, service, status, replica, gateway, size, after), next
// the path of the following page as the API gave it ("" for the first).
func (c *Client) DataplaneOverviews(ctx context.Context, meshName string, query url.Values) (DataplaneOverviews, error) {
	var l DataplaneOverviews
	p := path(meshName, "dataplanes+insights", "")
	if len(query) > 0 {
		p += "?" + query.Encode()
	}
	_, err := c.do(ctx, http.MethodGet, p, nil, 0, &l)
	return l, err
}

// Zones returns the router shards' zones as served (GET /zones).
func (c *Client) Zones(ctx context.Context) ([]Zone, error) {
	var l Zones
	if _, err := c.do(ctx, http.MethodGet, "/zones", nil, 0, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DataplaneColumns are a dataplane's TAGS and ADDRESS as `kuma-cp get dataplanes` prints
// them (the GUI's table shows the same).
func DataplaneColumns(r Resource) (tags, address string) { return dataplaneColumns(r) }
