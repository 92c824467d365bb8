package fanout

// Served is what the control plane serves agents: per mesh, per kind, per name, the resource
// as the link carries it; the meshless resources (HostnameGenerators without a mesh) under
// global. Sources (a directory, the store) build it; ControlPlane.Apply serves it.

// Doc is one resource as served.
type Doc struct {
	Kind, Mesh, Name string
	Meshless         bool // a HostnameGenerator for every mesh
	Body             []byte
	Source           string
}

// Served is what is served: per mesh, per kind, per name, the resource's body; the meshless
// resources (HostnameGenerators without a mesh) sit under global.
type Served struct {
	meshes map[string]map[string]map[string][]byte
	global map[string]map[string][]byte
}

// NewServed is an empty Served.
func NewServed() Served {
	return Served{meshes: map[string]map[string]map[string][]byte{}, global: map[string]map[string][]byte{}}
}

// Put serves d: under its mesh, or under global for a meshless resource.
func (sv Served) Put(d Doc) {
	byKind := sv.global
	if !d.Meshless {
		byKind = sv.meshes[d.Mesh]
		if byKind == nil {
			byKind = map[string]map[string][]byte{}
			sv.meshes[d.Mesh] = byKind
		}
	}
	if byKind[d.Kind] == nil {
		byKind[d.Kind] = map[string][]byte{}
	}
	byKind[d.Kind][d.Name] = d.Body
}

// forMesh is what one mesh's agents get of one kind: the mesh's own resources and the
// meshless ones (a mesh's own wins a name clash).
func (sv Served) ForMesh(meshName, kind string) map[string][]byte {
	own := sv.meshes[meshName][kind]
	global := sv.global[kind]
	if len(global) == 0 {
		return own
	}
	out := make(map[string][]byte, len(own)+len(global))
	for n, b := range global {
		out[n] = b
	}
	for n, b := range own {
		out[n] = b
	}
	return out
}

// Count is the number of resources served.
func (sv Served) Count() int {
	n := 0
	for _, byKind := range sv.meshes {
		for _, byName := range byKind {
			n += len(byName)
		}
	}
	for _, byName := range sv.global {
		n += len(byName)
	}
	return n
}

// Meshes is the number of meshes with resources.
func (sv Served) Meshes() int { return len(sv.meshes) }
