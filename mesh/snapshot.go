package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// NewSnapshot builds the Snapshot of self's mesh from already validated resources. Resources
// of other meshes are left out. self replaces any Dataplane of the same name in resources.
// Duplicate names within one kind are an error naming both sources.
func NewSnapshot(self *Dataplane, resources []Resource) (*Snapshot, error) {
	if self == nil {
		return nil, fmt.Errorf("snapshot: no dataplane given")
	}
	meshName := self.Mesh
	if meshName == "" {
		meshName = "default"
	}
	s := &Snapshot{Mesh: meshName, Self: self}
	seen := map[string]*Meta{}
	var errs Errors
	s.Dataplanes = append(s.Dataplanes, self)
	seen[KindDataplane+"/"+self.Name] = &self.Meta
	for _, r := range resources {
		m := r.GetMeta()
		if resourceMesh(m) != meshName && !meshless(r) {
			continue
		}
		key := r.Kind() + "/" + m.Name
		if prev, dup := seen[key]; dup {
			if r.Kind() == KindDataplane && prev == &self.Meta {
				continue // the dataplane file wins over its copy in the directory
			}
			errs = append(errs, &FieldError{Source: m.Source, Path: "name", Value: m.Name,
				Msg: fmt.Sprintf("duplicate %s name, also defined in %s", r.Kind(), prev.Source)})
			continue
		}
		seen[key] = m
		switch v := r.(type) {
		case *Dataplane:
			s.Dataplanes = append(s.Dataplanes, v)
		case *VirtualOutbound:
			s.VirtualOutbounds = append(s.VirtualOutbounds, v)
		case *TrafficRoute:
			s.TrafficRoutes = append(s.TrafficRoutes, v)
		case *MeshExternalService:
			s.MeshExternalServices = append(s.MeshExternalServices, v)
		case *HostnameGenerator:
			s.HostnameGenerators = append(s.HostnameGenerators, v)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	sortByName(s.Dataplanes)
	sortByName(s.VirtualOutbounds)
	sortByName(s.TrafficRoutes)
	sortByName(s.MeshExternalServices)
	sortByName(s.HostnameGenerators)
	s.Hash = hashSnapshot(s)
	return s, nil
}

// resourceMesh is the mesh a resource belongs to: its mesh field, else the kuma.io/mesh
// label, else "default". HostnameGenerators without either apply to every mesh.
func resourceMesh(m *Meta) string {
	if m.Mesh != "" {
		return m.Mesh
	}
	if v := m.Labels[MeshLabel]; v != "" {
		return v
	}
	return "default"
}

// meshless reports a HostnameGenerator with neither a mesh nor a kuma.io/mesh label: it
// applies to every mesh (HostnameGenerators are created on the global control plane).
func meshless(r Resource) bool {
	m := r.GetMeta()
	return r.Kind() == KindHostnameGenerator && m.Mesh == "" && m.Labels[MeshLabel] == ""
}

func sortByName[T Resource](rs []T) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].GetMeta().Name < rs[j].GetMeta().Name })
}

func hashSnapshot(s *Snapshot) string {
	h := sha256.New()
	enc := json.NewEncoder(h) // map keys are sorted by encoding/json: stable output
	_ = enc.Encode(s.Mesh)
	_ = enc.Encode(s.Self.Name)
	_ = enc.Encode(s.Dataplanes)
	_ = enc.Encode(s.VirtualOutbounds)
	_ = enc.Encode(s.TrafficRoutes)
	_ = enc.Encode(s.MeshExternalServices)
	_ = enc.Encode(s.HostnameGenerators)
	return hex.EncodeToString(h.Sum(nil)[:16])
}
