package mesh

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file maps each document form onto the typed resources:
//
//   - universal: `type: Dataplane|VirtualOutbound|TrafficRoute|MeshExternalService|
//     HostnameGenerator` with mesh/name/labels/creationTime at the top level;
//   - Kubernetes: `apiVersion`, `kind`, `metadata{name, namespace, labels,
//     creationTimestamp}`, `spec` (and a top-level `mesh`, as Kuma's CRDs and the L4 TrafficRoute design write
//     it); `status` is the control plane's and is ignored;
//   - the VirtualHost draft's `type: VirtualHost` (tags, host, port), decoded into a VirtualOutbound with
//     one selector.
//
// Legacy spellings are normalised here, so later stages see one form: a Dataplane outbound's
// `service: x` becomes tags[kuma.io/service]; TrafficRoute's `service` tag (the L4 TrafficRoute design) becomes
// `kuma.io/service`; HostnameGenerator's `selector.meshExternalService.matchLabels` (Kuma)
// becomes targetRef{kind: MeshExternalService, tags}.

// form knows how validation paths read in the document as the user wrote it.
type form struct {
	kind string // as written (VirtualHost stays VirtualHost in messages)
	path func(string) string
}

var kinds = []string{KindDataplane, KindVirtualOutbound, KindTrafficRoute, KindMeshExternalService,
	KindHostnameGenerator, KindMeshService, KindMeshTCPRoute, KindMeshHTTPRoute, kindVirtualHost, KindRouter, KindRoute,
	KindRouteBinding, KindDNSZone, KindMesh}

// actedOn is how many of kinds lead the list as the Kuma kinds the agent acts on.
const actedOn = 8

// userKinds are the kinds a user writes, as messages name them: the Kuma kinds acted on, the
// router shards' (VirtualHost is read as a VirtualOutbound; RouteBinding and DNSZone are the
// control plane's), and Kuma's Mesh, kept.
var userKinds = append(kinds[:actedOn:actedOn], KindRouter, KindRoute, KindMesh+" (kept, not acted on)")

// specKinds are the kinds whose universal form has a `spec` (Kuma's newer resources): their
// paths read the same in both forms, and their Kubernetes form's spec is their spec.
func specKind(kind string) bool {
	switch kind {
	case KindMeshExternalService, KindHostnameGenerator, KindMeshService, KindMeshTCPRoute, KindMeshHTTPRoute:
		return true
	}
	return false
}

const kindVirtualHost = "VirtualHost"

// decodeDocumentIn decodes and validates one document (source: its file and number), the
// resource's strings copied into strs (nil: the resource keeps slices of the document).
func decodeDocumentIn(strs *strArena, source Source, n any, raw ...[]byte) (Resource, Errors) {
	r, errs, _ := decodeWith(&decoder{source: source, raw: firstRaw(raw), strs: strs}, n)
	return r, errs
}

// firstRaw is the document's text when given (for exactTag), else nil.
func firstRaw(raw [][]byte) []byte {
	if len(raw) > 0 {
		return raw[0]
	}
	return nil
}

// decodeQuickIn is decodeDocumentIn in a quick pass (see decoder.quick); redo reports that
// the document has a problem to report: decode a fresh parse of it with decodeDocumentIn.
// The quick pass may have changed n.
func decodeQuickIn(strs *strArena, source Source, n any, raw ...[]byte) (r Resource, errs Errors, redo bool) {
	return decodeWith(&decoder{source: source, quick: true, raw: firstRaw(raw), strs: strs}, n)
}

func decodeWith(d *decoder, n any) (Resource, Errors, bool) {
	r, errs := d.document(n)
	if d.failed {
		return nil, nil, true
	}
	return r, errs, false
}

func (d *decoder) document(n any) (Resource, Errors) {
	source := d.source
	m, ok := n.(map[string]any)
	if !ok {
		d.errorf("", "", "expected a mapping with `type` (universal) or `kind` (Kubernetes), got %s", typeName(n))
		return nil, d.errs
	}
	typ, hasType := m["type"]
	kind, hasKind := m["kind"]
	var r Resource
	var f form
	switch {
	case hasType && hasKind:
		d.errorf("kind", "", "give `type` (universal form) or `kind` (Kubernetes form), not both")
		return nil, d.errs
	case hasType:
		r, f = d.universal(scalarText(typ), m)
	case hasKind && isListKind(scalarText(kind)):
		d.kind = "list"
		d.errorf("items", scalarText(m["items"]), "expected a list of resources, got %s", typeName(m["items"]))
		return nil, d.errs
	case hasKind:
		r, f = d.kubernetes(scalarText(kind), m)
	default:
		d.errorf("", "", "missing `type` (universal form) or `kind` (Kubernetes form)")
		return nil, d.errs
	}
	if r == nil {
		return nil, d.errs
	}
	meta := r.GetMeta()
	meta.Source = source
	if r.Kind() == KindMesh {
		if meta.Mesh != "" && meta.Mesh != meta.Name {
			d.errorf("mesh", meta.Mesh, "a Mesh is the mesh %q: leave mesh out", meta.Name)
		}
		meta.Mesh = meta.Name // a Mesh's mesh is itself
	}
	if meta.Mesh == "" && r.Kind() != KindHostnameGenerator {
		// HostnameGenerators without a mesh apply to every mesh; everything else defaults.
		meta.Mesh = ResourceMesh(meta)
	}
	meta.Mesh = d.strs.share(meta.Mesh)
	if mes, ok := r.(*MeshExternalService); ok {
		d.stampOrigin(mes, hasKind)
	}
	if dp, ok := r.(*Dataplane); ok {
		for i := range dp.Networking.Inbound {
			if x := dp.Networking.Inbound[i].InboundExtra; x != nil {
				x.State = d.strs.share(x.State)
			}
		}
		// the same on every dataplane of a Kubernetes mesh: copied once, not once each
		if tp := dp.Networking.TransparentProxying(); tp != nil {
			tp.IPFamilyMode = d.strs.share(tp.IPFamilyMode)
		}
	}
	v := &validator{source: source, kind: f.kind, name: meta.Name, path: f.path}
	v.resource(r)
	if len(d.errs) == 0 {
		return r, v.errs
	}
	// Report the validation problems too (all at once), except those about a field that
	// already failed to decode: that field is left empty, and "required" would be noise.
	errs := d.errs
	for _, ve := range v.errs {
		if !coveredBy(ve.Path, d.errs) {
			errs = append(errs, ve)
		}
	}
	return nil, errs
}

// coveredBy reports whether path is, or is inside, the path of one of errs, or is the
// object directly holding such a field (a `caCert` whose `inline` did not decode looks empty).
func coveredBy(path string, errs Errors) bool {
	for _, e := range errs {
		if within(path, e.Path) {
			return true
		}
		if within(e.Path, path) && len(e.Path) > len(path) && e.Path[len(path)] == '.' &&
			!strings.ContainsAny(e.Path[len(path)+1:], ".[") {
			return true
		}
	}
	return false
}

// within reports whether p is q or a field/element below q.
func within(p, q string) bool {
	if !strings.HasPrefix(p, q) {
		return false
	}
	return len(p) == len(q) || q == "" || p[len(q)] == '.' || p[len(q)] == '['
}

// kumaOnlyKinds are Kuma's resource kinds this agent does not read: a file of them (a dump
// of a Kuma mesh's policies) is refused with that said, not as a typo of a known kind.
var kumaOnlyKinds = []string{"TrafficPermission", "TrafficLog", "TrafficTrace", "HealthCheck", "CircuitBreaker",
	"FaultInjection", "Retry", "Timeout", "RateLimit", "ProxyTemplate", "ExternalService", "Zone", "ZoneIngress",
	"ZoneEgress", "MeshGateway", "MeshGatewayRoute", "MeshTrafficPermission", "MeshAccessLog", "MeshTrace",
	"MeshTimeout", "MeshRetry", "MeshCircuitBreaker", "MeshHealthCheck",
	"MeshLoadBalancingStrategy", "MeshFaultInjection", "MeshRateLimit", "MeshProxyPatch", "MeshMultiZoneService", "MeshMetric", "MeshPassthrough", "MeshTLS", "Secret", "GlobalSecret"}

// checkKind reports an unknown kind, suggesting the closest known one.
func (d *decoder) checkKind(field, kind string) bool {
	for _, k := range kinds {
		if k == kind {
			return true
		}
	}
	if slices.Contains(kumaOnlyKinds, kind) {
		d.errorf(field, kind, "a Kuma policy kuma-dp does not act on (it reads %s): keep it at a Kuma control plane, "+
			"out of the files this agent reads", strings.Join(userKinds, ", "))
	} else if s := Suggest(kind, kinds); s != "" {
		d.errorf(field, kind, "unknown kind, did you mean %s?", s)
	} else {
		d.errorf(field, kind, "unknown kind (known: %s)", strings.Join(userKinds, ", "))
	}
	return false
}

// universal decodes `type: X` documents.
func (d *decoder) universal(kind string, m map[string]any) (Resource, form) {
	d.kind, d.name = kind, d.nameText(m["name"])
	f := form{kind: kind, path: func(p string) string { return p }}
	if !d.checkKind("type", kind) {
		return nil, f
	}
	top := map[string]bool{"type": true}
	if specKind(kind) {
		top["status"] = true // the control plane's; ignored
	}
	kuma, single := false, false // a TrafficRoute's conf in Kuma's form (kumaRouteConf)
	switch kind {
	case kindVirtualHost:
		var vh virtualHost
		d.fields(reflect.ValueOf(&vh).Elem(), m, "", top)
		f.path = virtualHostPath
		return vh.toVirtualOutbound(), f
	case KindHostnameGenerator:
		var hg hostnameGeneratorIn
		d.fields(reflect.ValueOf(&hg).Elem(), m, "", top)
		return hg.toHostnameGenerator(d, "spec"), f
	case KindTrafficRoute:
		if _, ok := m["rules"]; ok {
			d.errorf("rules", "", "unknown field: a TrafficRoute holds one rule; write one TrafficRoute per rule")
			delete(m, "rules")
		}
		kuma, single = d.kumaRouteConf(m, "")
	case KindDataplane:
		d.outboundService(m["networking"], "networking")
	}
	first := len(d.errs)
	r := newResource(kind)
	d.fields(reflect.ValueOf(r).Elem(), m, "", top)
	d.finish(r, "")
	if kuma {
		d.kumaConfForm(&f, first, single)
	}
	return r, f
}

// kumaConfForm makes the errors reported from first on, and f's paths, name the fields of a
// TrafficRoute's conf as Kuma's form wrote them (see kumaRouteConf).
func (d *decoder) kumaConfForm(f *form, first int, single bool) {
	for _, e := range d.errs[first:] {
		e.Path = kumaConfPath(e.Path, single)
	}
	path := f.path
	f.path = func(p string) string { return path(kumaConfPath(p, single)) }
}

// nameText is a resource's name for error messages: as written, also when YAML read it as a
// number or a boolean (`name: y`, read as true).
func (d *decoder) nameText(n any) string {
	text := scalarText(n)
	switch n.(type) {
	case json.Number, bool:
		if raw, ok := d.exactTag("name", text); !ok {
			return raw
		}
	}
	return text
}

// kubeMeta is Kubernetes' metadata; server-set fields are accepted and ignored.
type kubeMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	CreationTimestamp time.Time         `json:"creationTimestamp,omitempty"`
	UID               any               `json:"uid,omitempty"`
	ResourceVersion   any               `json:"resourceVersion,omitempty"`
	Generation        any               `json:"generation,omitempty"`
	ManagedFields     any               `json:"managedFields,omitempty"`
	OwnerReferences   any               `json:"ownerReferences,omitempty"`
	Finalizers        any               `json:"finalizers,omitempty"`
}

// kubernetes decodes `apiVersion/kind/metadata/spec` documents: the top level (kubeTop),
// the metadata as the resource's Meta (kubeMeta), then the spec by kind (kubeSpec).
func (d *decoder) kubernetes(kind string, m map[string]any) (Resource, form) {
	md, _ := m["metadata"].(map[string]any)
	d.kind, d.name = kind, d.nameText(md["name"])
	f := form{kind: kind, path: kubePath(kind)}
	if !d.checkKind("kind", kind) {
		return nil, f
	}
	if kind == kindVirtualHost {
		d.errorf("kind", kind, "VirtualHost has only the universal form (type: VirtualHost)")
		return nil, f
	}
	if ns, _ := md["namespace"].(string); kind == KindDataplane && ns != "" && d.name != "" {
		d.name += "." + ns // Kuma's name of a namespaced dataplane (see kubeMeta)
	}
	km, mesh, spec := d.kubeTop(kind, m)
	meta := d.kubeMeta(kind, &km, mesh)
	r := d.kubeSpec(kind, km, meta, spec, &f)
	return r, f
}

// kubeTop reads the top level of a Kubernetes document: its metadata, mesh and spec; a
// Route's status goes into its spec (the control plane's record of its binding).
func (d *decoder) kubeTop(kind string, m map[string]any) (km kubeMeta, mesh string, spec map[string]any) {
	spec = map[string]any{}
	for _, k := range sortedKeys(m) {
		switch k {
		case "apiVersion", "kind":
		case "status":
			if kind == KindRoute {
				if s, ok := m["spec"].(map[string]any); ok {
					s["status"] = m[k]
				} else if m["spec"] == nil {
					spec["status"] = m[k]
				}
			}
		case "metadata":
			d.value(reflect.ValueOf(&km).Elem(), m[k], "metadata")
		case "mesh":
			d.key = k
			d.value(reflect.ValueOf(&mesh).Elem(), m[k], "mesh")
		case "spec":
			if s, ok := m[k].(map[string]any); ok {
				spec = s
			} else if m[k] != nil {
				d.errorf("spec", scalarText(m[k]), "expected a mapping, got %s", typeName(m[k]))
			}
		default:
			if !specKind(kind) {
				if _, body := fieldsOf(reflect.TypeOf(newResource(kind)).Elem()).byName[k]; body && k != "name" && k != "labels" && k != "creationTime" {
					d.errorf(k, "", "unknown field: in the Kubernetes form it goes under spec")
					continue
				}
			}
			d.unknown(k, k, []string{"apiVersion", "kind", "mesh", "metadata", "spec", "status"})
		}
	}
	return km, mesh, spec
}

// kubeMeta is the resource's Meta from its Kubernetes metadata, named and labelled as Kuma's
// control plane does.
func (d *decoder) kubeMeta(kind string, km *kubeMeta, mesh string) Meta {
	if (kind == KindMeshExternalService || kind == KindMeshService) && km.Namespace != "" && km.Labels[NamespaceLabel] == "" {
		// Kuma's control plane labels a resource from Kubernetes with its namespace: the
		// HostnameGenerator's {{ .Namespace }} and matchLabels read a MeshExternalService's
		// there. (Only its: no other kind's labels are read, and a label map per dataplane
		// would cost a mesh of Kubernetes dataplanes ~200 bytes each.)
		if km.Labels == nil {
			km.Labels = make(map[string]string, 1)
		}
		km.Labels[NamespaceLabel] = d.strs.share(km.Namespace)
	}
	if kind == KindMeshService && km.Name != "" && km.Labels[DisplayNameLabel] == "" {
		// Kuma labels a MeshService with the name it was written with.
		if km.Labels == nil {
			km.Labels = make(map[string]string, 1)
		}
		km.Labels[DisplayNameLabel] = d.strs.share(km.Name)
	}
	meta := Meta{Mesh: mesh, Name: km.Name}
	if km.Labels != nil || !km.CreationTimestamp.IsZero() {
		meta.MetaExtra = &MetaExtra{MetaLabels: km.Labels, MetaCreationTime: km.CreationTimestamp}
	}
	if kind == KindDataplane && km.Namespace != "" && km.Name != "" {
		// Kuma names a dataplane from Kubernetes <name>.<namespace>: pods of one name in two
		// namespaces are two dataplanes, and a universal file names them the same way.
		meta.Name = d.strs.share(km.Name + "." + km.Namespace)
	}
	return meta
}

// kubeSpec decodes the spec of a kind: Kuma 2.x's kinds have a spec type of their own, the
// others read their spec as the universal form's body (kubeBody).
func (d *decoder) kubeSpec(kind string, km kubeMeta, meta Meta, spec map[string]any, f *form) Resource {
	switch kind {
	case KindHostnameGenerator:
		var hs hostnameGeneratorSpecIn
		d.fields(reflect.ValueOf(&hs).Elem(), spec, "spec", nil)
		hg := hostnameGeneratorIn{Meta: meta, Spec: hs}
		return hg.toHostnameGenerator(d, "spec")
	case KindMeshExternalService:
		mes := &MeshExternalService{Meta: meta}
		d.fields(reflect.ValueOf(&mes.Spec).Elem(), spec, "spec", nil)
		d.finish(mes, "")
		return mes
	case KindMeshService:
		ms := &MeshService{Meta: meta}
		d.fields(reflect.ValueOf(&ms.Spec).Elem(), spec, "spec", nil)
		d.finish(ms, "")
		return ms
	case KindMeshTCPRoute:
		rt := &MeshTCPRoute{Meta: meta, Namespace: km.Namespace}
		d.fields(reflect.ValueOf(&rt.Spec).Elem(), spec, "spec", nil)
		return rt
	case KindMeshHTTPRoute:
		rt := &MeshHTTPRoute{Meta: meta, Namespace: km.Namespace}
		d.fields(reflect.ValueOf(&rt.Spec).Elem(), spec, "spec", nil)
		return rt
	}
	return d.kubeBody(kind, km.Namespace, meta, spec, f)
}

// kubeBody decodes a spec that is the universal form's body: what belongs in metadata is
// refused there, a TrafficRoute's Kuma conf is read as Kuma's (its form noted in f).
func (d *decoder) kubeBody(kind, namespace string, meta Meta, spec map[string]any, f *form) Resource {
	for _, k := range []string{"name", "mesh", "labels", "creationTime"} {
		if _, ok := spec[k]; ok {
			d.errorf("spec."+k, "", "unknown field: in the Kubernetes form it goes in metadata (mesh at the top level)")
			delete(spec, k)
		}
	}
	if kind == KindDataplane {
		d.outboundService(spec["networking"], "spec.networking")
	}
	kuma, single := false, false
	if kind == KindTrafficRoute {
		kuma, single = d.kumaRouteConf(spec, "spec.")
	}
	first := len(d.errs)
	r := newResource(kind)
	d.fields(reflect.ValueOf(r).Elem(), spec, "spec", nil)
	if dp, ok := r.(*Dataplane); ok {
		kept := dp.Kept() // the spec's, in its MetaExtra: kept beside the metadata's
		dp.Meta = meta
		dp.SetKept(kept)
	} else {
		*r.GetMeta() = meta
	}
	if rt, ok := r.(*Route); ok && rt.Namespace == "" {
		rt.Namespace = namespace
	}
	d.finish(r, "spec.")
	if kuma {
		d.kumaConfForm(f, first, single)
	}
	return r
}

// NewResource is an empty resource of kind, nil for a kind without a type of its own (the
// VirtualHost draft reads as a VirtualOutbound): what the caches register to write
// resources by their interface (gob).
func NewResource(kind string) Resource { return newResource(kind) }

// ResourceKinds are the kinds Decode reads into a resource of their own type.
func ResourceKinds() []string {
	var out []string
	for _, k := range kinds {
		if newResource(k) != nil {
			out = append(out, k)
		}
	}
	return out
}

func newResource(kind string) Resource {
	switch kind {
	case KindDataplane:
		return &Dataplane{}
	case KindVirtualOutbound:
		return &VirtualOutbound{}
	case KindTrafficRoute:
		return &TrafficRoute{}
	case KindMeshExternalService:
		return &MeshExternalService{}
	case KindHostnameGenerator:
		return &HostnameGenerator{}
	case KindMeshService:
		return &MeshService{}
	case KindMeshTCPRoute:
		return &MeshTCPRoute{}
	case KindMeshHTTPRoute:
		return &MeshHTTPRoute{}
	case KindRouter:
		return &Router{}
	case KindRoute:
		return &Route{}
	case KindRouteBinding:
		return &RouteBinding{}
	case KindDNSZone:
		return &DNSZone{}
	case KindMesh:
		return &Mesh{}
	}
	return nil
}

// finish applies the normalisations done on typed resources.
func (d *decoder) finish(r Resource, prefix string) {
	if ms, ok := r.(*MeshService); ok {
		d.normalizeTargetPorts(ms)
	}
	if mes, ok := r.(*MeshExternalService); ok {
		// The MeshExternalService design spells the last verification mode both SkipAll and SkipALL.
		if t := mes.Spec.TLS; t != nil && t.Verification != nil && t.Verification.Mode == "SkipALL" {
			t.Verification.Mode = "SkipAll"
		}
	}
	tr, ok := r.(*TrafficRoute)
	if !ok {
		return
	}
	for i := range tr.Sources {
		d.legacyService(&tr.Sources[i].Match, prefix+indexPath("sources", i)+".match")
	}
	for i := range tr.Destinations {
		d.legacyService(&tr.Destinations[i].Match, prefix+indexPath("destinations", i)+".match")
	}
	for i := range tr.Conf {
		d.legacyService(&tr.Conf[i].Destination, prefix+indexPath("conf", i)+".destination")
	}
}

// legacyService renames TrafficRoute's `service` tag (the L4 TrafficRoute design) to kuma.io/service.
func (d *decoder) legacyService(tp *Tags, path string) {
	t := *tp
	v, ok := t.Get("service")
	if !ok {
		return
	}
	if cur, both := t.Get(ServiceTag); both && cur != v {
		d.errorf(path+".service", v, "conflicts with %s %q (service is the legacy name of %s)", ServiceTag, cur, ServiceTag)
		return
	}
	*tp = t.Without("service").With(ServiceTag, v)
}

// outboundService moves a Dataplane outbound's legacy `service: x` into its tags.
func (d *decoder) outboundService(networking any, path string) {
	nw, _ := networking.(map[string]any)
	outs, _ := nw["outbound"].([]any)
	for i, o := range outs {
		om, _ := o.(map[string]any)
		svc, ok := om["service"]
		if !ok {
			continue
		}
		delete(om, "service")
		p := path + "." + indexPath("outbound", i)
		s, isStr := svc.(string)
		if !isStr {
			d.errorf(p+".service", scalarText(svc), "expected a string, got %s", typeName(svc))
			continue
		}
		tags, _ := om["tags"].(map[string]any)
		if om["tags"] != nil && tags == nil {
			continue // wrong type: reported when tags is decoded
		}
		if tags == nil {
			tags = map[string]any{}
			om["tags"] = tags
		}
		if cur, both := tags[ServiceTag]; both && cur != s {
			d.errorf(p+".service", s, "conflicts with tags[%q] %q", ServiceTag, scalarText(cur))
			continue
		}
		tags[ServiceTag] = s
	}
}

// virtualHost is the VirtualHost draft's VirtualHost.
type virtualHost struct {
	Meta
	Tags Tags   `json:"tags"`
	Host string `json:"host"`
	Port string `json:"port"`
}

func (vh *virtualHost) toVirtualOutbound() *VirtualOutbound {
	vo := &VirtualOutbound{Meta: vh.Meta, Conf: VirtualOutboundConf{Host: vh.Host, Port: vh.Port}}
	vo.Selectors = []Selector{{Match: vh.Tags}}
	return vo
}

// virtualHostPath maps VirtualOutbound paths back to VirtualHost fields.
func virtualHostPath(p string) string {
	switch {
	case strings.HasPrefix(p, "selectors[0].match"):
		return "tags" + strings.TrimPrefix(p, "selectors[0].match")
	case p == "selectors":
		return "tags"
	case strings.HasPrefix(p, "conf."):
		return strings.TrimPrefix(p, "conf.")
	}
	return p
}

// kubePath maps universal paths to the Kubernetes form.
func kubePath(kind string) func(string) string {
	return func(p string) string {
		switch {
		case p == "name":
			return "metadata.name"
		case p == "mesh":
			return "mesh"
		case strings.HasPrefix(p, "labels"):
			return "metadata." + p
		case p == "creationTime":
			return "metadata.creationTimestamp"
		case kind == KindRoute && p == "namespace":
			return "metadata.namespace"
		case kind == KindRoute && (p == "status" || strings.HasPrefix(p, "status.")):
			return p
		case specKind(kind):
			return p
		case p == "":
			return "spec"
		}
		return "spec." + p
	}
}

// hostnameGeneratorIn accepts both the MeshExternalService design's targetRef and Kuma's selector.
type hostnameGeneratorIn struct {
	Meta
	Spec hostnameGeneratorSpecIn `json:"spec"`
}

type hostnameGeneratorSpecIn struct {
	TargetRef *TargetRef `json:"targetRef,omitempty"`
	Selector  *struct {
		MeshExternalService  *labelSelector `json:"meshExternalService"`
		MeshService          *labelSelector `json:"meshService"`
		MeshMultiZoneService *labelSelector `json:"meshMultiZoneService"`
	} `json:"selector,omitempty"`
	Template string `json:"template"`
}

func (hg *hostnameGeneratorIn) toHostnameGenerator(d *decoder, specPath string) *HostnameGenerator {
	out := &HostnameGenerator{Meta: hg.Meta, Spec: HostnameGeneratorSpec{Template: hg.Spec.Template}}
	s := hg.Spec
	switch {
	case s.TargetRef != nil && s.Selector != nil:
		d.errorf(specPath+".selector", "", "give targetRef or selector, not both")
	case s.TargetRef != nil:
		out.Spec.TargetRef = *s.TargetRef
	case s.Selector != nil:
		// Kuma's generators for MeshService and MeshMultiZoneService (it creates some in
		// every zone) are kept with their kind (a MeshMultiZoneService's selects nothing
		// here) rather than refuse the mesh they come in.
		var kinds []string
		for _, k := range []struct {
			kind string
			sel  *labelSelector
		}{{KindMeshExternalService, s.Selector.MeshExternalService}, {KindMeshService, s.Selector.MeshService},
			{KindMeshMultiZoneService, s.Selector.MeshMultiZoneService}} {
			if k.sel != nil {
				kinds = append(kinds, k.kind)
				out.Spec.TargetRef = TargetRef{Kind: k.kind, Tags: TagsOf(k.sel.MatchLabels)}
			}
		}
		switch {
		case len(kinds) > 1:
			d.errorf(specPath+".selector", strings.Join(kinds, ", "), "give one selector")
		case len(kinds) == 0:
			out.Spec.TargetRef.Kind = KindMeshExternalService // refused: the reason is reported
			if !d.reported(specPath + ".selector") {
				d.errorf(specPath+".selector", "", "required: meshExternalService, meshService or meshMultiZoneService")
			}
		}
	}
	return out
}

// labelSelector is Kuma's `matchLabels` selector.
type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// reported reports whether a problem at or below path was reported (or, in a quick pass,
// whether anything failed).
func (d *decoder) reported(path string) bool {
	if d.quick {
		return d.failed
	}
	for _, e := range d.errs {
		if within(e.Path, path) {
			return true
		}
	}
	return false
}

func indexPath(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// Labels Kuma's zone control plane stamps on a resource created in it (model.ComputeLabels):
// its origin, its mesh and the kind of deployment it came from. Kuma's default
// HostnameGenerators select MeshExternalServices on kuma.io/origin: zone.
const (
	OriginLabel = "kuma.io/origin"
	EnvLabel    = "kuma.io/env"
	OriginZone  = "zone"
)

// stampOrigin labels a MeshExternalService as Kuma's zone control plane does what is created
// in it (a label written wins: a MeshExternalService synced from a global control plane says
// kuma.io/origin: global): kuma.io/origin zone, kuma.io/mesh its mesh, kuma.io/env
// kubernetes or universal after its form. Without them Kuma's default HostnameGenerators
// selected nothing and the service had a VIP but no hostname.
func (d *decoder) stampOrigin(mes *MeshExternalService, kubernetes bool) {
	env := "universal"
	if kubernetes {
		env = "kubernetes"
	}
	labels := mes.Labels()
	if labels == nil {
		labels = make(map[string]string, 3)
		mes.SetLabels(labels)
	}
	for k, v := range map[string]string{OriginLabel: OriginZone, MeshLabel: mes.Mesh, EnvLabel: env} {
		if _, ok := labels[k]; !ok {
			labels[k] = d.strs.share(v)
		}
	}
}
