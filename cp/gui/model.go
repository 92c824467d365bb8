package gui

import (
	"context"
	"fmt"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
	"github.com/kumadp/kuma-dp/xds"
)

// A dataplane's view of its mesh, computed as its agent computes it: the resources the
// control plane serves it (read through the API), decoded by package mesh with the store's
// creation times (as the control plane serves them), a snapshot for that dataplane, its
// hostnames and VIPs by package vipalloc with the agent's defaults (kuma-dp vips without a
// state file), and its Envoy resources by package xds.

// agentTypes are the API types of the kinds the control plane serves agents (the link's
// kinds that the API holds: not the zones it derives).
var agentTypes = func() []string {
	var out []string
	for _, kind := range cplink.Kinds {
		if typ := api.TypeOf(kind); typ != "" {
			out = append(out, typ)
		}
	}
	return out
}()

// decoded is an API resource as the agent decodes it: the store's creation time is its own.
func decoded(r api.Resource) (mesh.Resource, error) {
	rs, err := mesh.Decode(r.Mesh+"/"+r.Type+"/"+r.Name, r.Document()) // as its user wrote it
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("%s/%s/%s: %d resources in one document", r.Mesh, r.Type, r.Name, len(rs))
	}
	if m := rs[0].GetMeta(); !r.CreationTime.IsZero() || m.CreationTime().IsZero() {
		m.SetCreationTime(r.CreationTime)
	}
	return rs[0], nil
}

// meshResources reads what the control plane serves the agents of meshName: the mesh's
// resources and the HostnameGenerators for every mesh (stored under default). A resource
// that does not decode is left out, as the control plane leaves it out; problems names them.
func (s *Server) meshResources(ctx context.Context, meshName string) (rs []mesh.Resource, problems []string, err error) {
	for _, typ := range agentTypes {
		items, err := s.api.List(ctx, meshName, typ)
		if err != nil {
			return nil, nil, err
		}
		if typ == "hostnamegenerators" && meshName != "default" {
			global, err := s.api.List(ctx, "default", typ)
			if err != nil {
				return nil, nil, err
			}
			items = append(items, global...)
		}
		// The control plane serves a kind's resources by their names: of two stored under
		// the same name (routes of two namespaces), the later in the store's order is the
		// one served.
		byName := map[string]int{}
		for _, it := range items {
			r, err := decoded(it)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if it.Mesh != meshName && !mesh.Meshless(r) {
				continue // default's own HostnameGenerators
			}
			name := r.GetMeta().Name
			if i, ok := byName[name]; ok {
				problems = append(problems, fmt.Sprintf("%s %q: two are stored under this name (%s/%s/%s is served to agents in place of the other)", r.Kind(), name, it.Mesh, it.Type, it.Name))
				rs[i] = r
				continue
			}
			byName[name] = len(rs)
			rs = append(rs, r)
		}
	}
	return rs, problems, nil
}

// dataplaneView is one dataplane's snapshot, VIP table and Envoy resources.
type dataplaneView struct {
	Self     *mesh.Dataplane
	Snapshot *mesh.Snapshot
	Table    *vipalloc.Table
	Envoy    *xds.Resources
	// EnvoyErr: the Envoy resources could not be made (the rest stands).
	EnvoyErr error
	Problems []string
}

// viewOf computes the view of dataplane name in meshName; opts shape the Envoy resources.
func (s *Server) viewOf(ctx context.Context, meshName, name string, opts xds.Options) (*dataplaneView, error) {
	rs, problems, err := s.meshResources(ctx, meshName)
	if err != nil {
		return nil, err
	}
	v := &dataplaneView{Problems: problems}
	for _, r := range rs {
		if dp, ok := r.(*mesh.Dataplane); ok && dp.Name == name {
			v.Self = dp
		}
	}
	if v.Self == nil {
		return nil, &api.NotFoundError{Kind: mesh.KindDataplane, Mesh: meshName, Name: name}
	}
	if v.Snapshot, err = mesh.NewSnapshot(v.Self, rs); err != nil {
		return nil, fmt.Errorf("the mesh as dataplane %s sees it: %w", name, err)
	}
	alloc, err := vipalloc.New(vipalloc.DefaultConfig())
	if err != nil {
		return nil, err
	}
	if v.Table, err = alloc.Allocate(v.Snapshot); err != nil {
		return nil, fmt.Errorf("allocating the VIPs of dataplane %s: %w", name, err)
	}
	v.Envoy, v.EnvoyErr = xds.NewGenerator().Generate(v.Snapshot, v.Table, opts)
	return v, nil
}
