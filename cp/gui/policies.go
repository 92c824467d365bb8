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
// with what it selects: the dataplanes of each selector (counted by the API's filter, a
// few named, the rest a link to the filtered list), or the MeshExternalServices a
// HostnameGenerator names.

// policyTypes are the policy kinds' API types, in the page's order.
var policyTypes = []string{"virtualoutbounds", "trafficroutes", "meshexternalservices", "hostnamegenerators"}

// namesShown is how many selected dataplanes a selector names.
const namesShown = 5

type selects struct {
	What, Tags, Link, Names string
	Count                   string
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
	for _, typ := range policyTypes {
		pk := policyKind{Kind: api.Types[typ]}
		for i, it := range lists[typ] {
			item := policyItem{ID: fmt.Sprintf("%s-%d", typ, i), Name: it.Name, Version: it.Version, YAML: specYAML(api.Types[typ], it.Spec), Age: api.Age(it.ModificationTime, now)}
			x, err := decoded(it)
			if err != nil {
				item.Selects = []selects{{What: "does not decode:", Count: err.Error()}}
			} else if item.Selects, err = s.selected(ctx, meshName, x, mess); err != nil {
				return "", meshName, nil, err
			}
			pk.Items = append(pk.Items, item)
		}
		d.Kinds = append(d.Kinds, pk)
	}
	return "Policies of " + meshName, meshName, d, nil
}

// selected is what a policy selects.
func (s *Server) selected(ctx context.Context, meshName string, r mesh.Resource, mess []*mesh.MeshExternalService) ([]selects, error) {
	var out []selects
	add := func(what string, sels []mesh.Selector) error {
		for _, sel := range sels {
			one, err := s.dataplanesOf(ctx, meshName, what, sel.Match)
			if err != nil {
				return err
			}
			out = append(out, one)
		}
		return nil
	}
	var err error
	switch p := r.(type) {
	case *mesh.VirtualOutbound:
		err = add("dataplanes", p.Selectors)
	case *mesh.TrafficRoute:
		if err = add("sources", p.Sources); err == nil {
			err = add("destinations", p.Destinations)
		}
	case *mesh.MeshExternalService:
		out = append(out, selects{What: "every dataplane of the mesh reaches it", Count: "-"})
	case *mesh.HostnameGenerator:
		var names []string
		for _, m := range mess {
			if p.Spec.TargetRef.Tags.Matches(tagset.Of(m.Labels)) {
				names = append(names, m.Name)
			}
		}
		out = append(out, selects{What: p.Spec.TargetRef.Kind + "s labelled", Tags: p.Spec.TargetRef.Tags.String(),
			Count: strconv.Itoa(len(names)), Names: strings.Join(names, ", ")})
	}
	return out, err
}

// dataplanesOf counts the dataplanes whose inbound (or gateway) has every tag of match, and
// names a few, through the API's filter.
func (s *Server) dataplanesOf(ctx context.Context, meshName, what string, match mesh.Tags) (selects, error) {
	q := url.Values{"size": {strconv.Itoa(namesShown)}}
	for _, t := range match {
		q.Add("tag", t.Key+":"+t.Value)
	}
	page, err := s.api.DataplaneOverviews(ctx, meshName, q)
	if err != nil {
		return selects{}, err
	}
	var names []string
	for _, it := range page.Items {
		names = append(names, it.Name)
	}
	if page.Total > len(names) {
		names = append(names, "...")
	}
	q.Del("size")
	return selects{What: what, Tags: match.String(), Count: strconv.Itoa(page.Total), Names: strings.Join(names, ", "),
		Link: pathOf("meshes", meshName, "dataplanes") + "?" + q.Encode()}, nil
}
