package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
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
	reach := ReachOf(self)
	for _, r := range resources {
		m := r.GetMeta()
		if ResourceMesh(m) != meshName && !Meshless(r) {
			continue
		}
		if dp, ok := r.(*Dataplane); ok && !reach.Keeps(dp) {
			continue // a service self does not reach (transparentProxying.reachableServices)
		}
		key := r.Kind() + "/" + m.Name
		if prev, dup := seen[key]; dup {
			if r.Kind() == KindDataplane && prev == &self.Meta {
				continue // the dataplane file wins over its copy in the directory
			}
			errs = append(errs, &FieldError{Source: m.Source.String(), Path: "name", Value: m.Name,
				Msg: fmt.Sprintf("duplicate %s name, also defined in %s", r.Kind(), prev.Source.String())})
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
		case *Router:
			s.Routers = append(s.Routers, v)
		case *Route:
			s.Routes = append(s.Routes, v)
		case *DNSZone:
			s.DNSZones = append(s.DNSZones, v)
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
	sortByName(s.Routers)
	sortByName(s.Routes)
	sortByName(s.DNSZones)
	s.ModelHash = hashSnapshot(s)
	s.Hash = s.ModelHash
	if len(s.DNSZones) > 0 {
		h := sha256.New()
		h.Write([]byte(s.ModelHash))
		_ = json.NewEncoder(h).Encode(s.DNSZones)
		s.Hash = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return s, nil
}

// ResourceMesh is the mesh a resource belongs to: its mesh field, else the kuma.io/mesh
// label, else "default". HostnameGenerators without either apply to every mesh (Meshless).
func ResourceMesh(m *Meta) string {
	if m.Mesh != "" {
		return m.Mesh
	}
	if v := m.Labels[MeshLabel]; v != "" {
		return v
	}
	return "default"
}

// Meshless reports a HostnameGenerator with neither a mesh nor a kuma.io/mesh label: it
// applies to every mesh (HostnameGenerators are created on the global control plane). A
// DNSZone applies to every mesh too.
func Meshless(r Resource) bool {
	m := r.GetMeta()
	if r.Kind() == KindDNSZone {
		return true
	}
	return r.Kind() == KindHostnameGenerator && m.Mesh == "" && m.Labels[MeshLabel] == ""
}

func sortByName[T Resource](rs []T) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].GetMeta().Name < rs[j].GetMeta().Name })
}

// hashChunk is how many resources of one kind are hashed together; fixed, so the hash does
// not depend on the machine.
const hashChunk = 1024

// hashSnapshot is a content hash of the snapshot: the JSON of its resources (encoding/json
// sorts map keys: stable), in chunks of hashChunk resources hashed on every core, then the
// chunks' digests in order.
func hashSnapshot(s *Snapshot) string {
	var chunks []any
	chunks = appendChunks(chunks, s.Dataplanes)
	chunks = appendChunks(chunks, s.VirtualOutbounds)
	chunks = appendChunks(chunks, s.TrafficRoutes)
	chunks = appendChunks(chunks, s.MeshExternalServices)
	chunks = appendChunks(chunks, s.HostnameGenerators)
	chunks = appendChunks(chunks, s.Routers)
	chunks = appendChunks(chunks, s.Routes)
	sums := make([][sha256.Size]byte, len(chunks))
	hashOne := func(i int) {
		h := sha256.New()
		_ = json.NewEncoder(h).Encode(chunks[i])
		h.Sum(sums[i][:0])
	}
	workers := min(runtime.GOMAXPROCS(0), len(chunks))
	if workers <= 1 {
		for i := range chunks {
			hashOne(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(chunks); i = int(next.Add(1)) - 1 {
					hashOne(i)
				}
			}()
		}
		wg.Wait()
	}
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode(s.Mesh)
	_ = enc.Encode(s.Self.Name)
	_ = enc.Encode([]int{len(s.Dataplanes), len(s.VirtualOutbounds), len(s.TrafficRoutes),
		len(s.MeshExternalServices), len(s.HostnameGenerators), len(s.Routers), len(s.Routes)})
	for i := range sums {
		h.Write(sums[i][:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// appendChunks appends rs cut in pieces of hashChunk (one empty piece for no resources, so
// every kind takes a place).
func appendChunks[T Resource](chunks []any, rs []T) []any {
	if len(rs) == 0 {
		return append(chunks, rs)
	}
	for i := 0; i < len(rs); i += hashChunk {
		chunks = append(chunks, rs[i:min(i+hashChunk, len(rs))])
	}
	return chunks
}

// LocalZone is the zone this dataplane runs in: the kuma.io/zone tag of its first inbound
// that has one ("" when none does). Kuma's HostnameGenerator {{ .Zone }} falls back to it
// for resources of the local zone.
func (s *Snapshot) LocalZone() string {
	if s == nil || s.Self == nil {
		return ""
	}
	for _, in := range s.Self.Networking.Inbound {
		if z := in.Tags.Value(ZoneTag); z != "" {
			return z
		}
	}
	return ""
}
