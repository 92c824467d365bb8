package mesh

import "encoding/json"

// KindMesh is Kuma's Mesh: the mesh itself (its name is the mesh's).
const KindMesh = "Mesh"

// Mesh is Kuma's Mesh resource, accepted in both forms (`type: Mesh`, `kind: Mesh` with a
// spec) so that a dump of a Kuma deployment, or a `mesh.yaml` beside the policies, loads as
// its users write it. Nothing it configures is acted on here: mTLS, logging, tracing,
// metrics, passthrough, zone egress, locality-aware load balancing, constraints and
// MeshService modes are features of Kuma's control plane. Its fields are kept as written
// (KeptFields names them), a control plane stores and returns the document, and the agent's
// model leaves it out.
type Mesh struct {
	Meta
	MTLS                        json.RawMessage `json:"mtls,omitempty"`
	Logging                     json.RawMessage `json:"logging,omitempty"`
	Tracing                     json.RawMessage `json:"tracing,omitempty"`
	Metrics                     json.RawMessage `json:"metrics,omitempty"`
	Networking                  json.RawMessage `json:"networking,omitempty"`
	Routing                     json.RawMessage `json:"routing,omitempty"`
	Constraints                 json.RawMessage `json:"constraints,omitempty"`
	SkipCreatingInitialPolicies json.RawMessage `json:"skipCreatingInitialPolicies,omitempty"`
	MeshServices                json.RawMessage `json:"meshServices,omitempty"`
}

func (*Mesh) Kind() string { return KindMesh }

// KeptFields are the fields the Mesh sets, all kept and none acted on, in the order Kuma's
// documentation lists them.
func (m *Mesh) KeptFields() []string {
	var out []string
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"mtls", m.MTLS}, {"logging", m.Logging}, {"tracing", m.Tracing}, {"metrics", m.Metrics},
		{"networking", m.Networking}, {"routing", m.Routing}, {"constraints", m.Constraints},
		{"skipCreatingInitialPolicies", m.SkipCreatingInitialPolicies}, {"meshServices", m.MeshServices}} {
		if len(f.v) > 0 && string(f.v) != "null" {
			out = append(out, f.name)
		}
	}
	return out
}
