package gui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/tagset"
)

// A mesh's policies, every kind, each as it was applied (its YAML, inline secrets hidden)
// with what it selects: the dataplanes of each selector (counted in one pass over the
// mesh's dataplanes, whatever the number of selectors; a few named, the rest a link to the
// list the API filters the same way), or the MeshExternalServices a HostnameGenerator names.

// policyTypes are the policy kinds' API types, in the page's order (api.PolicyKinds').
var policyTypes = func() []string {
	out := make([]string, len(api.PolicyKinds))
	for i, kind := range api.PolicyKinds {
		out[i] = api.TypeOf(kind)
	}
	return out
}()

// namesShown is how many selected dataplanes a selector names.
const namesShown = 5

type selects struct {
	What, Tags, Link, Names string
	Count                   string
	sel                     *selCount // a selector's, filled by countSelected
}

// selCount is one selector's dataplanes: how many, and the first few names.
type selCount struct {
	tags  mesh.Tags
	n     int
	names []string
}

type policyItem struct {
	ID, Name, YAML, Age string
	Version             int64
	Selects             []selects
}

type policyKind struct {
	Kind  string
	Items []policyItem
}

type policiesData struct{ Kinds []policyKind }

func (s *Server) policies(ctx context.Context, r *http.Request) (string, string, any, error) {
	meshName := r.PathValue("mesh")
	var d policiesData
	var mess []*mesh.MeshExternalService
	lists := map[string][]api.Resource{}
	for _, typ := range policyTypes {
		items, err := s.api.List(ctx, meshName, typ)
		if err != nil {
			return "", meshName, nil, err
		}
		lists[typ] = items
		for _, it := range items {
			if x, err := decoded(it); err == nil {
				if m, ok := x.(*mesh.MeshExternalService); ok {
					mess = append(mess, m)
				}
			}
		}
	}
	now := time.Now()
	var counts []*selCount
	for _, typ := range policyTypes {
		pk := policyKind{Kind: api.Types[typ]}
		for i, it := range lists[typ] {
			item := policyItem{ID: fmt.Sprintf("%s-%d", typ, i), Name: it.Name, Version: it.Version, YAML: specYAML(api.Types[typ], it.Spec), Age: api.Age(it.ModificationTime, now)}
			if x, err := decoded(it); err != nil {
				item.Selects = []selects{{What: "does not decode:", Count: err.Error()}}
			} else {
				item.Selects = selected(x, mess)
			}
			for _, sel := range item.Selects {
				if sel.sel != nil {
					counts = append(counts, sel.sel)
				}
			}
			pk.Items = append(pk.Items, item)
		}
		d.Kinds = append(d.Kinds, pk)
	}
	if err := s.countSelected(ctx, meshName, counts); err != nil {
		return "", meshName, nil, err
	}
	for _, pk := range d.Kinds {
		for _, item := range pk.Items {
			for i := range item.Selects {
				item.Selects[i].fill(meshName)
			}
		}
	}
	return "Policies of " + meshName, meshName, d, nil
}

// selected is what a policy selects; a selector's dataplanes are counted later.
func selected(r mesh.Resource, mess []*mesh.MeshExternalService) []selects {
	var out []selects
	add := func(what string, sels []mesh.Selector) {
		for _, sel := range sels {
			out = append(out, selects{What: what, Tags: sel.Match.String(), sel: &selCount{tags: sel.Match}})
		}
	}
	switch p := r.(type) {
	case *mesh.VirtualOutbound:
		add("dataplanes", p.Selectors)
	case *mesh.TrafficRoute:
		add("sources", p.Sources)
		add("destinations", p.Destinations)
	case *mesh.MeshExternalService:
		out = append(out, selects{What: "every dataplane of the mesh reaches it", Count: "-"})
	case *mesh.MeshService:
		switch sel := p.Spec.Selector; {
		case len(sel.DataplaneTags) > 0:
			out = append(out, selects{What: "dataplanes", Tags: sel.DataplaneTags.String(), sel: &selCount{tags: sel.DataplaneTags}})
		case sel.DataplaneRef != nil:
			out = append(out, selects{What: "the dataplane", Tags: sel.DataplaneRef.Name, Count: "1"})
		case sel.DataplaneLabels != nil:
			out = append(out, selects{What: "dataplanes labelled", Tags: tagset.Of(sel.DataplaneLabels.MatchLabels).String(), Count: "-"})
		}
	case *mesh.MeshTCPRoute:
		out = append(out, targetRef(p.Spec.TargetRef))
	case *mesh.MeshHTTPRoute:
		out = append(out, targetRef(p.Spec.TargetRef))
	case *mesh.HostnameGenerator:
		var names []string
		for _, m := range mess {
			if p.Spec.TargetRef.Tags.Matches(tagset.Of(m.Labels())) {
				names = append(names, m.Name)
			}
		}
		out = append(out, selects{What: p.Spec.TargetRef.Kind + "s labelled", Tags: p.Spec.TargetRef.Tags.String(),
			Count: strconv.Itoa(len(names)), Names: strings.Join(names, ", ")})
	}
	return out
}

// targetRef is what a route policy's targetRef names (the whole mesh when it has none).
func targetRef(ref *mesh.PolicyRef) selects {
	if ref == nil {
		return selects{What: "the whole mesh", Count: "-"}
	}
	what := ref.Kind
	if ref.Name != "" {
		what += " " + ref.Name
	}
	tags := ref.Tags
	if len(ref.Labels) > 0 {
		tags = tagset.Of(ref.Labels)
	}
	return selects{What: "applies to " + what, Tags: tags.String(), Count: "-"}
}

// countSelected counts the dataplanes of every selector in one pass over the mesh's
// dataplanes (read through the API a page at a time), with the API's tag filter
// (api.HasTags).
func (s *Server) countSelected(ctx context.Context, meshName string, counts []*selCount) error {
	if len(counts) == 0 {
		return nil
	}
	q := url.Values{"size": {strconv.Itoa(api.MaxPageSize)}}
	for {
		page, err := s.api.DataplaneOverviews(ctx, meshName, q)
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			x, err := decoded(it.Resource)
			dp, ok := x.(*mesh.Dataplane)
			if err != nil || !ok {
				continue
			}
			for _, c := range counts {
				if api.HasTags(dp, c.tags) {
					c.n++
					if len(c.names) < namesShown {
						c.names = append(c.names, it.Name)
					}
				}
			}
		}
		u, err := url.Parse(page.Next)
		if page.Next == "" || err != nil {
			return err
		}
		q = u.Query()
	}
}

// fill writes a selector's count, names and the link to its dataplanes.
func (sel *selects) fill(meshName string) {
	c := sel.sel
	if c == nil {
		return
	}
	q := url.Values{}
	for _, t := range c.tags {
		q.Add("tag", t.Key+":"+t.Value)
	}
	names := c.names
	if c.n > len(names) {
		names = append(names, "...")
	}
	sel.Count, sel.Names = strconv.Itoa(c.n), strings.Join(names, ", ")
	sel.Link = pathOf("meshes", meshName, "dataplanes") + "?" + q.Encode()
}
