package mesh

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// NewSnapshot builds the Snapshot of self's mesh from already validated resources. Resources
// of other meshes are left out. self replaces any Dataplane of the same name in resources.
// Duplicate names within one kind are an error naming both sources.
func NewSnapshot(self *Dataplane, resources []Resource) (*Snapshot, error) {
	return new(SnapshotBuilder).Build(self, resources)
}

// SnapshotBuilder builds the snapshots of one source one after another (NewSnapshot's
// rules). It keeps the digests of the stretches of resources it hashed for the last
// snapshot, by their resources' pointers: resources are never written once decoded, and a
// source hands the same objects again for what did not change, so the next snapshot hashes
// only the stretches that did (one dataplane changed among 100,000: one stretch of ~256,
// not all). The zero value is ready; safe for concurrent use (builds are serialized).
type SnapshotBuilder struct {
	mu   sync.Mutex
	last map[Resource]stretchSum // the last snapshot's stretches, by their first resource
	// hashed counts the stretches the last build hashed (tests).
	hashed int
}

// stretchSum is a hashed stretch: its resources (a []T of the snapshot it was cut from,
// which keeps them alive, so a pointer seen again is the same object) and their digest.
type stretchSum struct {
	rs  any
	sum [sha256.Size]byte
}

// Build is NewSnapshot, hashing again only what changed since the builder's last snapshot.
func (b *SnapshotBuilder) Build(self *Dataplane, resources []Resource) (*Snapshot, error) {
	if self == nil {
		return nil, fmt.Errorf("snapshot: no dataplane given")
	}
	meshName := self.Mesh
	if meshName == "" {
		meshName = "default"
	}
	s := &Snapshot{Mesh: meshName, Self: self}
	others, out := s.gather(resources)
	if dups := s.sortKinds(others, out); len(dups) > 0 {
		return nil, duplicateErrors(dups, resources)
	}
	s.ModelHash = b.hash(s)
	s.Hash = s.ModelHash
	if len(s.DNSZones) > 0 {
		h := sha256.New()
		h.Write([]byte(s.ModelHash))
		_ = json.NewEncoder(h).Encode(s.DNSZones)
		s.Hash = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return s, nil
}

// gather puts the resources of s's mesh into s by kind, and returns the dataplanes but
// s.Self (those it reaches) and whether each kind came in name order without a repeat
// (sources hand them so - a file's, the last model's): checked here, where each name is read
// anyway, instead of by a pass of its own.
func (s *Snapshot) gather(resources []Resource) ([]*Dataplane, outOfOrder) {
	self := s.Self
	dataplanes := 1
	for _, r := range resources {
		if _, ok := r.(*Dataplane); ok {
			dataplanes++
		}
	}
	others := make([]*Dataplane, 0, dataplanes)
	var out outOfOrder
	reach := ReachOf(self)
	for _, r := range resources {
		m := r.GetMeta()
		if ResourceMesh(m) != s.Mesh && !Meshless(r) {
			continue
		}
		switch v := r.(type) {
		case *Dataplane:
			if m.Name == self.Name || !reach.Keeps(v) {
				// the dataplane file wins over its copy in the directory; the others are
				// services self does not reach (transparentProxying.reachableServices)
				continue
			}
			others = appendInOrder(others, v, m.Name, &out.dataplanes)
		case *VirtualOutbound:
			s.VirtualOutbounds = appendInOrder(s.VirtualOutbounds, v, m.Name, &out.virtualOutbounds)
		case *TrafficRoute:
			s.TrafficRoutes = appendInOrder(s.TrafficRoutes, v, m.Name, &out.trafficRoutes)
		case *MeshExternalService:
			s.MeshExternalServices = appendInOrder(s.MeshExternalServices, v, m.Name, &out.meshExternalServices)
		case *HostnameGenerator:
			s.HostnameGenerators = appendInOrder(s.HostnameGenerators, v, m.Name, &out.hostnameGenerators)
		case *MeshService:
			s.MeshServices = appendInOrder(s.MeshServices, v, m.Name, &out.meshServices)
		case *MeshTCPRoute:
			s.MeshTCPRoutes = appendInOrder(s.MeshTCPRoutes, v, m.Name, &out.meshTCPRoutes)
		case *MeshHTTPRoute:
			s.MeshHTTPRoutes = appendInOrder(s.MeshHTTPRoutes, v, m.Name, &out.meshHTTPRoutes)
		case *Router:
			s.Routers = appendInOrder(s.Routers, v, m.Name, &out.routers)
		case *Route:
			s.Routes = appendInOrder(s.Routes, v, StoreName(v), &out.routes)
		case *DNSZone:
			s.DNSZones = appendInOrder(s.DNSZones, v, m.Name, &out.dnsZones)
		}
	}
	return others, out
}

// sortKinds puts s.Self in its place among the other dataplanes and sorts each kind that
// did not come in order; sorted by name, a kind's duplicates are neighbours: it returns them.
func (s *Snapshot) sortKinds(others []*Dataplane, out outOfOrder) [][]Resource {
	var dups [][]Resource
	if !out.dataplanes {
		at, _ := slices.BinarySearchFunc(others, s.Self.Name, func(d *Dataplane, name string) int { return strings.Compare(d.Name, name) })
		s.Dataplanes = slices.Insert(others, at, s.Self)
	} else {
		s.Dataplanes = append(others, s.Self)
		dups = sortByName(dups, s.Dataplanes)
	}
	dups = sortUnless(out.virtualOutbounds, dups, s.VirtualOutbounds)
	dups = sortUnless(out.trafficRoutes, dups, s.TrafficRoutes)
	dups = sortUnless(out.meshExternalServices, dups, s.MeshExternalServices)
	dups = sortUnless(out.hostnameGenerators, dups, s.HostnameGenerators)
	dups = sortUnless(out.meshServices, dups, s.MeshServices)
	dups = sortUnless(out.meshTCPRoutes, dups, s.MeshTCPRoutes)
	dups = sortUnless(out.meshHTTPRoutes, dups, s.MeshHTTPRoutes)
	dups = sortUnless(out.routers, dups, s.Routers)
	dups = sortUnless(out.routes, dups, s.Routes)
	return sortUnless(out.dnsZones, dups, s.DNSZones)
}

// ResourceMesh is the mesh a resource belongs to: its mesh field, else the kuma.io/mesh
// label, else "default". HostnameGenerators without either apply to every mesh (Meshless).
func ResourceMesh(m *Meta) string {
	if m.Mesh != "" {
		return m.Mesh
	}
	if v := m.Labels()[MeshLabel]; v != "" {
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
	return r.Kind() == KindHostnameGenerator && m.Mesh == "" && m.Labels()[MeshLabel] == ""
}

// outOfOrder says, per kind, whether a snapshot's resources came out of name order (or with
// a name twice): then they are sorted, and their duplicates found.
type outOfOrder struct {
	dataplanes, virtualOutbounds, trafficRoutes, meshExternalServices bool
	hostnameGenerators, routers, routes, dnsZones                     bool
	meshServices, meshTCPRoutes, meshHTTPRoutes                       bool
}

// appendInOrder appends r (named name) to rs, and sets *out unless r comes after the last.
func appendInOrder[T Resource](rs []T, r T, name string, out *bool) []T {
	if !*out && len(rs) > 0 && name <= StoreName(rs[len(rs)-1]) {
		*out = true
	}
	return append(rs, r)
}

// sortUnless sorts rs by name (sortByName) when they came out of order.
func sortUnless[T Resource](out bool, dups [][]Resource, rs []T) [][]Resource {
	if !out {
		return dups
	}
	return sortByName(dups, rs)
}

// sortByName sorts rs by name (StoreName: a route's namespace is part of it) and appends to
// dups each run of resources of the same name.
func sortByName[T Resource](dups [][]Resource, rs []T) [][]Resource {
	slices.SortFunc(rs, func(a, b T) int { return strings.Compare(StoreName(a), StoreName(b)) })
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && StoreName(rs[j]) == StoreName(rs[i]) {
			j++
		}
		if j-i > 1 {
			run := make([]Resource, 0, j-i)
			for _, r := range rs[i:j] {
				run = append(run, r)
			}
			dups = append(dups, run)
		}
		i = j
	}
	return dups
}

// duplicateErrors says, for each resource of a duplicated name but the first given in
// resources, where that first one is defined.
func duplicateErrors(dups [][]Resource, resources []Resource) Errors {
	at := map[Resource]int{}
	for _, run := range dups {
		for _, r := range run {
			at[r] = -1
		}
	}
	for i, r := range resources {
		if _, ok := at[r]; ok {
			at[r] = i
		}
	}
	var errs Errors
	more := 0 // past MaxFileErrors, counted (100,000 copies of one policy printed 10 MB)
	for _, run := range dups {
		slices.SortFunc(run, func(a, b Resource) int { return at[a] - at[b] })
		first := run[0].GetMeta()
		for _, r := range run[1:] {
			if len(errs) >= MaxFileErrors {
				more++
				continue
			}
			m := r.GetMeta()
			errs = append(errs, &FieldError{Source: m.Source.String(), Path: "name", Value: m.Name,
				Msg: fmt.Sprintf("duplicate %s name, also defined in %s", r.Kind(), first.Source.String())})
		}
	}
	if more > 0 {
		errs = append(errs, &FieldError{Msg: fmt.Sprintf("%d more resources of a duplicate name, not listed", more)})
	}
	return errs
}

// A kind's resources, sorted by name, are hashed in stretches. A stretch ends after a
// resource whose name hashes to 0 modulo stretchMean, or at stretchMax resources: where
// stretches end depends on the names alone, so adding or removing a resource changes the
// stretch it is in and (practically) no other, and the hash does not depend on the machine.
const (
	stretchMean = 256
	stretchMax  = 4096
)

// stretch is one stretch of a snapshot: its resources as a []T of the snapshot's, the first
// of them, and (once known) their digest.
type stretch struct {
	rs    any
	first Resource
	sum   [sha256.Size]byte
	known bool
}

// hash is the snapshot's content hash: the digests of its stretches (the JSON of their
// resources; encoding/json sorts map keys, so it is stable) in order, with the mesh, self's
// name and the count of each kind. Stretches the last snapshot had (the same resources, by
// pointer) keep their digest; the others are hashed on every core.
func (b *SnapshotBuilder) hash(s *Snapshot) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var parts []stretch
	parts = cut(parts, s.Dataplanes, b.last)
	parts = cut(parts, s.VirtualOutbounds, b.last)
	parts = cut(parts, s.TrafficRoutes, b.last)
	parts = cut(parts, s.MeshExternalServices, b.last)
	parts = cut(parts, s.HostnameGenerators, b.last)
	parts = cut(parts, s.MeshServices, b.last)
	parts = cut(parts, s.MeshTCPRoutes, b.last)
	parts = cut(parts, s.MeshHTTPRoutes, b.last)
	parts = cut(parts, s.Routers, b.last)
	parts = cut(parts, s.Routes, b.last)
	var todo []int
	for i := range parts {
		if !parts[i].known {
			todo = append(todo, i)
		}
	}
	b.hashed = len(todo)
	hashOne := func(i int) {
		h := sha256.New()
		_ = json.NewEncoder(h).Encode(parts[i].rs)
		h.Sum(parts[i].sum[:0])
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	if workers <= 1 {
		for _, i := range todo {
			hashOne(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := int(next.Add(1)) - 1; j < len(todo); j = int(next.Add(1)) - 1 {
					hashOne(todo[j])
				}
			}()
		}
		wg.Wait()
	}
	b.last = make(map[Resource]stretchSum, len(parts))
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode(s.Mesh)
	_ = enc.Encode(s.Self.Name)
	_ = enc.Encode([]int{len(s.Dataplanes), len(s.VirtualOutbounds), len(s.TrafficRoutes),
		len(s.MeshExternalServices), len(s.HostnameGenerators), len(s.Routers), len(s.Routes),
		len(s.MeshServices), len(s.MeshTCPRoutes), len(s.MeshHTTPRoutes)})
	for _, p := range parts {
		h.Write(p.sum[:])
		b.last[p.first] = stretchSum{rs: p.rs, sum: p.sum}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// cut appends rs's stretches to parts, with the digest of those last holds unchanged.
func cut[T Resource](parts []stretch, rs []T, last map[Resource]stretchSum) []stretch {
	for start := 0; start < len(rs); {
		end := start + 1
		for end < len(rs) && end-start < stretchMax && !stretchEnds(rs[end-1].GetMeta().Name) {
			end++
		}
		p := stretch{rs: rs[start:end], first: rs[start]}
		if prev, ok := last[p.first]; ok {
			if prs, ok := prev.rs.([]T); ok && samePointers(prs, rs[start:end]) {
				p.sum, p.known = prev.sum, true
			}
		}
		parts = append(parts, p)
		start = end
	}
	return parts
}

// samePointers reports whether a and b hold the same objects in the same order.
func samePointers[T Resource](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if Resource(a[i]) != Resource(b[i]) {
			return false
		}
	}
	return true
}

// stretchEnds reports whether a stretch ends after the resource named name: a hash of the
// whole name, eight bytes at a time, the same on every machine.
func stretchEnds(name string) bool {
	h := uint64(len(name)) * 0x9e3779b97f4a7c15
	for len(name) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64([]byte(name[:8]))) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
		name = name[8:]
	}
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 0x94d049bb133111eb
	}
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h%stretchMean == 0
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

// Resources yields the snapshot's resources of kind, sorted by name (self among the
// dataplanes); nothing for a kind it does not hold.
func (s *Snapshot) Resources(kind string) iter.Seq[Resource] {
	return func(yield func(Resource) bool) {
		switch kind {
		case KindDataplane:
			each(s.Dataplanes, yield)
		case KindVirtualOutbound:
			each(s.VirtualOutbounds, yield)
		case KindTrafficRoute:
			each(s.TrafficRoutes, yield)
		case KindMeshExternalService:
			each(s.MeshExternalServices, yield)
		case KindHostnameGenerator:
			each(s.HostnameGenerators, yield)
		case KindMeshService:
			each(s.MeshServices, yield)
		case KindMeshTCPRoute:
			each(s.MeshTCPRoutes, yield)
		case KindMeshHTTPRoute:
			each(s.MeshHTTPRoutes, yield)
		case KindRouter:
			each(s.Routers, yield)
		case KindRoute:
			each(s.Routes, yield)
		case KindDNSZone:
			each(s.DNSZones, yield)
		}
	}
}

func each[T Resource](rs []T, yield func(Resource) bool) {
	for _, r := range rs {
		if !yield(r) {
			return
		}
	}
}
