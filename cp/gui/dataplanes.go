package gui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
)

// A mesh's dataplanes: one page of GET /meshes/{mesh}/dataplanes+insights, filtered as the
// API filters (name, tags, service, status, replica, gateway). A page never reads more than
// its own dataplanes from the API, whatever the mesh's size.

// pageSize is the dataplanes a page shows.
const pageSize = 50

// dataplaneRow is one dataplane of the table.
type dataplaneRow struct {
	Name, Tags, Address, Status, Replicas, Age string
	Online                                     bool
}

type dataplanesData struct {
	Rows       []dataplaneRow
	Total      int
	First      int // the position of the page's first row, from 1
	Next, Head string
	Filter     dataplaneFilter
	Filtered   bool
}

// dataplaneFilter is the page's query as the form shows it.
type dataplaneFilter struct {
	Name, Service, Status, Replica, Gateway string
	Tags                                    string // key:value, space-separated
}

// filterQuery is the API query of the page's own query (size, after and the filters).
func filterQuery(q url.Values) (dataplaneFilter, url.Values, error) {
	f := dataplaneFilter{Name: q.Get("name"), Service: q.Get("service"), Status: q.Get("status"),
		Replica: q.Get("replica"), Gateway: q.Get("gateway"), Tags: strings.Join(q["tag"], " ")}
	out := url.Values{"size": {strconv.Itoa(pageSize)}}
	for k, v := range map[string]string{"name": f.Name, "service": f.Service, "status": f.Status, "replica": f.Replica, "gateway": f.Gateway, "after": q.Get("after")} {
		if v != "" {
			out.Set(k, v)
		}
	}
	for _, t := range q["tag"] {
		for _, one := range strings.Fields(t) { // the form's one field may hold several
			out.Add("tag", one)
		}
	}
	if n := q.Get("from"); n != "" {
		if _, err := strconv.Atoi(n); err != nil {
			return f, nil, badRequest("from %q: want a whole number", n)
		}
	}
	return f, out, nil
}

func (s *Server) dataplanes(ctx context.Context, r *http.Request) (string, string, any, error) {
	meshName := r.PathValue("mesh")
	f, q, err := filterQuery(r.URL.Query())
	if err != nil {
		return "", meshName, nil, err
	}
	page, err := s.api.DataplaneOverviews(ctx, meshName, q)
	if err != nil {
		return "", meshName, nil, err
	}
	first, _ := strconv.Atoi(r.URL.Query().Get("from"))
	d := dataplanesData{Total: page.Total, First: max(first, 1), Filter: f, Filtered: len(q) > 1 || q.Has("after")}
	now := time.Now()
	for _, it := range page.Items {
		tags, addr := api.DataplaneColumns(it.Resource)
		row := dataplaneRow{Name: it.Name, Tags: tags, Address: addr, Status: it.Insight.Status,
			Online: it.Insight.Status == "Online", Replicas: strings.Join(it.Insight.Replicas, ", "), Age: api.Age(it.ModificationTime, now)}
		d.Rows = append(d.Rows, row)
	}
	base := pathOf("meshes", meshName, "dataplanes")
	d.Head = base
	if page.Next != "" {
		// the API's next link, as a GUI link: its query, and where the next page starts
		if u, err := url.Parse(page.Next); err == nil {
			nq := r.URL.Query()
			nq.Set("after", u.Query().Get("after"))
			nq.Set("from", strconv.Itoa(d.First+len(d.Rows)))
			d.Next = base + "?" + nq.Encode()
		}
	}
	if q.Has("after") || len(q) > 1 {
		hq := r.URL.Query()
		hq.Del("after")
		hq.Del("from")
		d.Head = base + "?" + hq.Encode()
	}
	return "Dataplanes of " + meshName, meshName, d, nil
}
