// Package mesh owns the resources of one mesh as users write them: their Go types, decoding
// from the YAML/JSON formats of the design documents, validation with field paths, selector
// matching and ranking, and the immutable Snapshot later stages consume.
//
// It never allocates addresses, renders hostnames or produces Envoy/DNS data.
package mesh

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kumadp/kuma-dp/tagset"
)

// Well-known tag keys.
const (
	ServiceTag  = "kuma.io/service"
	ZoneTag     = "kuma.io/zone"
	ProtocolTag = "kuma.io/protocol"
	MeshLabel   = "kuma.io/mesh"
	IgnoreLabel = "kuma.io/ignore"
	Wildcard    = tagset.Wildcard
)

// Kind names, as written in `type:` (universal) or `kind:` (Kubernetes-style) fields.
const (
	KindDataplane           = "Dataplane"
	KindVirtualOutbound     = "VirtualOutbound"
	KindTrafficRoute        = "TrafficRoute"
	KindMeshExternalService = "MeshExternalService"
	KindHostnameGenerator   = "HostnameGenerator"
)

// KindMeshService is Kuma 2.x's service resource (meshservice.go). KindMeshMultiZoneService
// is a kind a HostnameGenerator may select that is no resource here: such a generator is
// kept and selects nothing.
const (
	KindMeshService          = "MeshService"
	KindMeshMultiZoneService = "MeshMultiZoneService"
)

// DisplayNameLabel is Kuma's label of a resource's name as written (a MeshService from
// Kubernetes is labelled with its metadata.name): a HostnameGenerator's {{ .DisplayName }}.
const DisplayNameLabel = "kuma.io/display-name"

// Tags is a set of key/value tags (dataplane inbound tags, selector matches, destinations),
// sorted by key: see package tagset.
type Tags = tagset.Tags

// Tag is one key/value pair of a Tags.
type Tag = tagset.Tag

// TagsOf returns the tags of m (sorted by key).
func TagsOf(m map[string]string) Tags { return tagset.Of(m) }

// Meta is what every resource carries: identity plus where it was read from.
//
// What most resources of a large mesh do not have - labels (a Dataplane written for Kuma's
// universal mode has none), a creation time, a Dataplane's kept fields - is in MetaExtra,
// nil when the document has none of it: read them through Labels, CreationTime and
// Dataplane.Kept, write them through SetLabels, SetCreationTime and Dataplane.SetKept. A
// mesh may hold 100,000 Dataplanes, and the three cost 40 bytes in each.
type Meta struct {
	Mesh string `json:"mesh,omitempty"`
	Name string `json:"name"`
	*MetaExtra
	// Source is where the resource was read from, printed "file#doc" (e.g.
	// "policies/vo.yaml#2") in error messages; the zero Source if unknown.
	Source Source `json:"-"`
}

// MetaExtra holds the parts of a resource few resources of a large mesh have. Its fields
// read as the resource's own in JSON. DataplaneKept is a Dataplane's alone: nil in every
// other kind, whose documents do not accept its fields (see fieldsOf).
type MetaExtra struct {
	MetaLabels       map[string]string `json:"labels,omitempty"`
	MetaCreationTime time.Time         `json:"creationTime,omitempty"`
	*DataplaneKept
}

// Labels is the resource's labels (nil when it has none). Do not write the map: set a new one
// with SetLabels (a decoded resource is shared).
func (m *Meta) Labels() map[string]string {
	if m.MetaExtra == nil {
		return nil
	}
	return m.MetaLabels
}

// CreationTime is the resource's creation time (zero when not known).
func (m *Meta) CreationTime() time.Time {
	if m.MetaExtra == nil {
		return time.Time{}
	}
	return m.MetaCreationTime
}

// SetLabels sets the resource's labels (nil: none).
func (m *Meta) SetLabels(l map[string]string) {
	if m.MetaExtra == nil && l == nil {
		return
	}
	x := m.extra()
	x.MetaLabels = l
	m.dropEmptyExtra()
}

// SetCreationTime sets the resource's creation time (zero: not known).
func (m *Meta) SetCreationTime(t time.Time) {
	if m.MetaExtra == nil && t.IsZero() {
		return
	}
	x := m.extra()
	x.MetaCreationTime = t
	m.dropEmptyExtra()
}

// extra is a MetaExtra of m's own to write: a copy when m shares one (copies of a Meta
// share their MetaExtra, as they share their labels' map).
func (m *Meta) extra() *MetaExtra {
	x := &MetaExtra{}
	if m.MetaExtra != nil {
		*x = *m.MetaExtra
	}
	m.MetaExtra = x
	return x
}

func (m *Meta) dropEmptyExtra() {
	if x := m.MetaExtra; x != nil && x.MetaLabels == nil && x.MetaCreationTime.IsZero() && x.DataplaneKept == nil {
		m.MetaExtra = nil
	}
}

// Resource is implemented by every resource type of this package.
type Resource interface {
	Kind() string
	GetMeta() *Meta
}

// Dataplane is Kuma's universal Dataplane resource. Kuma's documented fields the agent does
// not act on (metrics, probes, modificationTime) are accepted and kept as written, in
// DataplaneKept (Kept, nil when the document has none of them), which is in its Meta's
// MetaExtra: a mesh holds many dataplanes, and a pointer of their own would take a
// one-inbound dataplane to the next size class of Go's allocator (152 -> 160 bytes).
type Dataplane struct {
	Meta
	Networking Networking `json:"networking"`
}

// Kept is d's kept fields (nil when it has none).
func (d *Dataplane) Kept() *DataplaneKept {
	if d.MetaExtra == nil {
		return nil
	}
	return d.DataplaneKept
}

// SetKept sets d's kept fields (nil: none).
func (d *Dataplane) SetKept(k *DataplaneKept) {
	if d.MetaExtra == nil && k == nil {
		return
	}
	x := d.extra()
	x.DataplaneKept = k
	d.dropEmptyExtra()
}

// DataplaneKept holds the fields of a Dataplane the agent keeps but does not act on. Its
// fields read as the Dataplane's own in JSON; read them in Go through Dataplane.Kept.
type DataplaneKept struct {
	Metrics          json.RawMessage `json:"metrics,omitempty"`
	Probes           json.RawMessage `json:"probes,omitempty"`
	ModificationTime string          `json:"modificationTime,omitempty"`
}

// Networking is Dataplane.networking. What most dataplanes of a mesh do not have (an
// advertised address, outbounds, transparent proxying, a gateway, an admin port) is in
// NetworkingExtra, nil when the document has none of it: a mesh holds many dataplanes.
// Read those fields through the methods of the same names (nil-safe).
type Networking struct {
	Address string    `json:"address"`
	Inbound []Inbound `json:"inbound,omitempty"`
	*NetworkingExtra
}

// NetworkingExtra holds the fields of networking that few dataplanes have. Its fields read
// as Networking's own in JSON. Kuma's networking.gateway (a gateway dataplane) and
// networking.admin (Envoy's admin port) are accepted and kept as written; the agent does
// not act on them.
type NetworkingExtra struct {
	AdvertisedAddress   string               `json:"advertisedAddress,omitempty"`
	Outbound            []Outbound           `json:"outbound,omitempty"`
	TransparentProxying *TransparentProxying `json:"transparentProxying,omitempty"`
	Gateway             json.RawMessage      `json:"gateway,omitempty"`
	Admin               json.RawMessage      `json:"admin,omitempty"`
}

// AdvertisedAddress is networking.advertisedAddress ("" when not set).
func (n *Networking) AdvertisedAddress() string {
	if n.NetworkingExtra == nil {
		return ""
	}
	return n.NetworkingExtra.AdvertisedAddress
}

// Outbound is networking.outbound (nil when not set).
func (n *Networking) Outbound() []Outbound {
	if n.NetworkingExtra == nil {
		return nil
	}
	return n.NetworkingExtra.Outbound
}

// TransparentProxying is networking.transparentProxying (nil when not set).
func (n *Networking) TransparentProxying() *TransparentProxying {
	if n.NetworkingExtra == nil {
		return nil
	}
	return n.NetworkingExtra.TransparentProxying
}

// Extra returns n's NetworkingExtra, allocating it when nil (for code building a Dataplane).
func (n *Networking) Extra() *NetworkingExtra {
	if n.NetworkingExtra == nil {
		n.NetworkingExtra = &NetworkingExtra{}
	}
	return n.NetworkingExtra
}

// Inbound is one entry of networking.inbound. What most inbounds do not have (an address of
// their own, a service address, a state, health, a name, a service probe) is in
// InboundExtra, nil when the inbound has none of it; read address, state, health and
// service address through the methods of the same names (nil-safe).
type Inbound struct {
	Port        uint32 `json:"port"`
	ServicePort uint32 `json:"servicePort,omitempty"`
	Tags        Tags   `json:"tags"`
	*InboundExtra
}

// InboundExtra holds the fields of an inbound that few inbounds have. Its fields read as
// Inbound's own in JSON. Kuma's name and serviceProbe are accepted and kept as written; the
// agent does not act on them.
type InboundExtra struct {
	// Address is the inbound's own address (Address reads it, "" when not set: the
	// dataplane's networking.address).
	Address        string `json:"address,omitempty"`
	ServiceAddress string `json:"serviceAddress,omitempty"`
	// State is Kuma's inbound state: Ready (default), NotReady or Ignored. An Ignored
	// inbound gets no hostname and is no endpoint.
	State        string          `json:"state,omitempty"`
	Health       *InboundHealth  `json:"health,omitempty"`
	Name         string          `json:"name,omitempty"`
	ServiceProbe json.RawMessage `json:"serviceProbe,omitempty"`
}

// Address is the inbound's own address ("" when not set: networking.address is).
func (in *Inbound) Address() string {
	if in.InboundExtra == nil {
		return ""
	}
	return in.InboundExtra.Address
}

// ServiceAddress is the inbound's serviceAddress ("" when not set).
func (in *Inbound) ServiceAddress() string {
	if in.InboundExtra == nil {
		return ""
	}
	return in.InboundExtra.ServiceAddress
}

// State is the inbound's state as written ("" when not set: Ready).
func (in *Inbound) State() string {
	if in.InboundExtra == nil {
		return ""
	}
	return in.InboundExtra.State
}

// Health is the inbound's health (nil when not set).
func (in *Inbound) Health() *InboundHealth {
	if in.InboundExtra == nil {
		return nil
	}
	return in.InboundExtra.Health
}

// Extra returns in's InboundExtra, allocating it when nil (for code building an Inbound).
func (in *Inbound) Extra() *InboundExtra {
	if in.InboundExtra == nil {
		in.InboundExtra = &InboundExtra{}
	}
	return in.InboundExtra
}

// InboundHealth is Kuma's inbound.health.
type InboundHealth struct {
	Ready bool `json:"ready"`
}

// Inbound states (Kuma's).
const (
	InboundReady    = "Ready"
	InboundNotReady = "NotReady"
	InboundIgnored  = "Ignored"
)

// FirstReservedPort starts the ports Kuma keeps for itself (49151 up): an inbound there is
// infrastructure, not a service to name.
const FirstReservedPort = 49151

// Ignored reports whether the inbound is left out of everything (state Ignored).
func (in *Inbound) Ignored() bool { return in.State() == InboundIgnored }

// Named reports whether the inbound's tags give hostnames: not Ignored, not on a reserved port.
func (in *Inbound) Named() bool { return !in.Ignored() && in.Port < FirstReservedPort }

// Serving reports whether the inbound takes traffic, as Kuma decides it: not Ignored, not
// NotReady, and not health.ready: false. Other dataplanes' Envoys get it as an endpoint only
// then; its service keeps its names and VIPs either way.
func (in *Inbound) Serving() bool {
	h := in.Health()
	return !in.Ignored() && in.State() != InboundNotReady && (h == nil || h.Ready)
}

// Outbound is one entry of networking.outbound: port + tags, or port + backendRef.
// Hostname is filled by vipalloc (the VirtualOutbound design: "hostname on the outbound"), never by users.
type Outbound struct {
	Address    string      `json:"address,omitempty"` // defaults to 127.0.0.1
	Port       uint32      `json:"port"`
	Tags       Tags        `json:"tags,omitempty"`
	BackendRef *BackendRef `json:"backendRef,omitempty"`
	Hostname   string      `json:"hostname,omitempty"`
}

// BackendRef points an outbound at a resource (kind MeshExternalService for now).
type BackendRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Port uint32 `json:"port,omitempty"`
}

// TransparentProxying is networking.transparentProxying.
type TransparentProxying struct {
	RedirectPortInbound  uint32 `json:"redirectPortInbound,omitempty"`
	RedirectPortOutbound uint32 `json:"redirectPortOutbound,omitempty"`
	IPFamilyMode         string `json:"ipFamilyMode,omitempty"`
	// ReachableServices, when not empty, lists the only services this dataplane reaches
	// (Kuma's): the agent keeps only their dataplanes (see Reach).
	ReachableServices []string `json:"reachableServices,omitempty"`
	// Kuma's, accepted and kept; the agent does not act on them: see
	// docs/kuma-compatibility.md.
	RedirectPortInboundV6 uint32          `json:"redirectPortInboundV6,omitempty"`
	DirectAccessServices  json.RawMessage `json:"directAccessServices,omitempty"`
	ReachableBackends     json.RawMessage `json:"reachableBackends,omitempty"`
}

// Selector is one `- match: {...}` element.
type Selector struct {
	Match Tags `json:"match"`
}

// VirtualOutbound (the VirtualOutbound design, plus Kuma's shipped `parameters` form and the VirtualHost draft's VirtualHost,
// which decodes into this type).
type VirtualOutbound struct {
	Meta
	Selectors []Selector          `json:"selectors"`
	Conf      VirtualOutboundConf `json:"conf"`
}

// VirtualOutboundConf is VirtualOutbound.conf.
type VirtualOutboundConf struct {
	// Host is a text/template. Supported syntaxes: `{{service}}` with Tags (the VirtualOutbound design),
	// `{{.service}}` with Parameters (Kuma), `{{tag "version"}}` (the VirtualHost draft).
	Host string `json:"host"`
	// Port is a number or a template rendering to one (Kuma allows `{{.port}}`). Always kept as text.
	Port string `json:"port"`
	// Tags maps a tag key to the template variable name (the VirtualOutbound design: "kuma.io/service": service).
	Tags map[string]string `json:"tags,omitempty"`
	// Parameters is Kuma's form of the same mapping.
	Parameters []Parameter `json:"parameters,omitempty"`
}

// Parameter is one `{name, tagKey}` of Kuma's VirtualOutbound conf.parameters.
type Parameter struct {
	Name   string `json:"name"`
	TagKey string `json:"tagKey,omitempty"`
}

// TrafficRoute is the L4 TrafficRoute of the L4 TrafficRoute design (one rule per resource),
// with Kuma's conf.loadBalancer and conf.http.
type TrafficRoute struct {
	Meta
	Sources      []Selector            `json:"sources"`
	Destinations []Selector            `json:"destinations"`
	Conf         []WeightedDestination `json:"conf"`
	// LoadBalancer is Kuma's conf.loadBalancer ({roundRobin: {}}, leastRequest, ringHash,
	// random, maglev), kept as written and read by ParseLoadBalancer (trafficroute_kuma.go).
	LoadBalancer json.RawMessage `json:"loadBalancer,omitempty"`
	// HTTP is Kuma's conf.http (trafficroute_http.go): nil for a route without HTTP rules.
	HTTP []HTTPRule `json:"http,omitempty"`
}

// WeightedDestination is one element of TrafficRoute.conf.
type WeightedDestination struct {
	Weight      uint32 `json:"weight"`
	Destination Tags   `json:"destination"`
}

// MeshExternalService (the MeshExternalService design). Mesh comes from the kuma.io/mesh label (default "default").
type MeshExternalService struct {
	Meta
	Spec MeshExternalServiceSpec `json:"spec"`
}

// MeshExternalServiceSpec is MeshExternalService.spec.
type MeshExternalServiceSpec struct {
	Match     MESMatch      `json:"match"`
	Extension *MESExtension `json:"extension,omitempty"`
	Endpoints []MESEndpoint `json:"endpoints,omitempty"`
	TLS       *MESTLS       `json:"tls,omitempty"`
}

// MESMatch is spec.match.
type MESMatch struct {
	Type     string `json:"type,omitempty"` // HostnameGenerator (the default, as in Kuma)
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol,omitempty"` // tcp|grpc|http|http2
}

// MESExtension is spec.extension.
type MESExtension struct {
	Type   string          `json:"type"`
	Config json.RawMessage `json:"config,omitempty"`
}

// MESEndpoint is one spec.endpoints element: address is an IP, a domain or unix://path.
type MESEndpoint struct {
	Address string `json:"address"`
	Port    uint32 `json:"port,omitempty"`
	// Priority is Kuma's endpoint priority (lower first); 0 is the highest.
	Priority uint32 `json:"priority,omitempty"`
}

// MESTLS is spec.tls.
type MESTLS struct {
	Enabled            *bool            `json:"enabled,omitempty"`
	Version            *MESTLSVersion   `json:"version,omitempty"`
	AllowRenegotiation bool             `json:"allowRenegotiation,omitempty"`
	Verification       *MESVerification `json:"verification,omitempty"`
}

// MESTLSVersion is spec.tls.version: TLSAuto|TLS10|TLS11|TLS12|TLS13.
type MESTLSVersion struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max,omitempty"`
}

// MESVerification is spec.tls.verification.
type MESVerification struct {
	Mode            string      `json:"mode,omitempty"` // Secured (default)|SkipSAN|SkipCA|SkipAll
	SubjectAltNames []SANMatch  `json:"subjectAltNames,omitempty"`
	CACert          *DataSource `json:"caCert,omitempty"`
	ClientCert      *DataSource `json:"clientCert,omitempty"`
	ClientKey       *DataSource `json:"clientKey,omitempty"`
	// ServerName is the name sent in SNI and checked in the certificate (Kuma's); default:
	// the first endpoint's domain.
	ServerName string `json:"serverName,omitempty"`
}

// SANMatch is one subjectAltNames element: type Exact (default) or Prefix.
type SANMatch struct {
	Type  string `json:"type,omitempty"`
	Value string `json:"value"`
}

// DataSource is one of inline (base64 bytes), inlineString or secret (a name).
type DataSource struct {
	Inline       []byte `json:"inline,omitempty"`
	InlineString string `json:"inlineString,omitempty"`
	Secret       string `json:"secret,omitempty"`
}

// HostnameGenerator (the MeshExternalService design).
type HostnameGenerator struct {
	Meta
	Spec HostnameGeneratorSpec `json:"spec"`
}

// HostnameGeneratorSpec is HostnameGenerator.spec. Both the MeshExternalService design's `targetRef{kind, tags}` and
// Kuma's `selector.meshExternalService.matchLabels` decode into TargetRef.
type HostnameGeneratorSpec struct {
	TargetRef TargetRef `json:"targetRef"`
	// Template: `{{ name }}`, `{{ label "x" }}`, `.Name`, `.DisplayName`, `.Mesh`, `.Zone`.
	Template string `json:"template"`
}

// TargetRef selects resources of Kind whose labels contain every Tags entry.
type TargetRef struct {
	Kind string `json:"kind"`
	Tags Tags   `json:"tags,omitempty"`
}

func (*Dataplane) Kind() string           { return KindDataplane }
func (*VirtualOutbound) Kind() string     { return KindVirtualOutbound }
func (*TrafficRoute) Kind() string        { return KindTrafficRoute }
func (*MeshExternalService) Kind() string { return KindMeshExternalService }
func (*HostnameGenerator) Kind() string   { return KindHostnameGenerator }

func (m *Meta) GetMeta() *Meta { return m }

// Snapshot is one mesh as one dataplane sees it. Immutable once built (by NewSnapshot), built
// only from validated resources. Every slice is sorted by name.
type Snapshot struct {
	Mesh string
	// Self is the dataplane this agent runs for.
	Self *Dataplane
	// Dataplanes is every dataplane of the mesh, Self included.
	Dataplanes           []*Dataplane
	VirtualOutbounds     []*VirtualOutbound
	TrafficRoutes        []*TrafficRoute
	MeshExternalServices []*MeshExternalService
	HostnameGenerators   []*HostnameGenerator
	// Kuma 2.x's services and route policies (meshservice.go, meshroute.go).
	MeshServices   []*MeshService
	MeshTCPRoutes  []*MeshTCPRoute
	MeshHTTPRoutes []*MeshHTTPRoute
	// Routers and Routes of the mesh (a router replica serves its admitted routes), and the
	// zones of the control plane's DNS for router shards (DNSZones apply to every mesh).
	Routers  []*Router
	Routes   []*Route
	DNSZones []*DNSZone
	// Hash is a content hash (hex) of everything above; equal hashes mean equal content.
	// ModelHash is the same without DNSZones: equal ModelHashes mean only the zones (which
	// change with a router replica's readiness) may differ.
	ModelHash string
	Hash      string
}

// GatewayTags are Kuma's networking.gateway.tags (nil when the dataplane is no gateway, or
// its gateway does not decode: validation reports that).
func (n *Networking) GatewayTags() Tags {
	if n.NetworkingExtra == nil || len(n.NetworkingExtra.Gateway) == 0 {
		return nil
	}
	var g struct {
		Tags map[string]any `json:"tags"`
	}
	if json.Unmarshal(n.NetworkingExtra.Gateway, &g) != nil || len(g.Tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(g.Tags))
	for k, v := range g.Tags {
		m[k] = fmt.Sprint(v)
	}
	return TagsOf(m)
}
