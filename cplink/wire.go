package cplink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	yaml2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

// The wire form of the model between a control plane and its agents (docs/cplink.md).
//
// Resources travel in incremental ADS (envoy.service.discovery.v3 DeltaAggregatedResources)
// as generic envelopes: each Resource is an Any whose type URL names the kind
// ("kuma-dp.io/mesh.Dataplane") and whose value is a google.protobuf.BytesValue holding the
// resource's canonical document, a universal-form block YAML document (keys sorted) that
// mesh.Decode reads back, so the agent decodes and validates it with exactly the code that
// reads files. Block YAML rather than JSON because mesh's one-pass reader takes it (JSON
// goes through sigs.k8s.io/yaml): 19 us instead of 155 us for the example dataplane
// (BenchmarkDecodeEnvelope). Any YAML or JSON
// document is accepted on receipt. The resource name is the resource's name within its
// mesh and kind; its version is a hash of the envelope, so equal content has an equal
// version across control-plane restarts.

// TypeURLPrefix starts the type URL of every kind.
const TypeURLPrefix = "kuma-dp.io/mesh."

// Kinds are the kinds the link carries, in the order the agent subscribes to them.
var Kinds = []string{
	mesh.KindDataplane,
	mesh.KindVirtualOutbound,
	mesh.KindTrafficRoute,
	mesh.KindMeshExternalService,
	mesh.KindHostnameGenerator,
	// Kuma 2.x's services and route policies.
	mesh.KindMeshService,
	mesh.KindMeshTCPRoute,
	mesh.KindMeshHTTPRoute,
	// Router shards: a router replica's agent serves its admitted routes to Envoy, and every
	// agent's resolver answers the shards' names from the zones the control plane built.
	mesh.KindRouter,
	mesh.KindRoute,
	mesh.KindDNSZone,
}

// TypeURL is the type URL of a kind.
func TypeURL(kind string) string { return TypeURLPrefix + kind }

// KindOf is the kind a type URL names, "" for a type URL that is not the link's.
func KindOf(typeURL string) string {
	if k, ok := strings.CutPrefix(typeURL, TypeURLPrefix); ok && slices.Contains(Kinds, k) {
		return k
	}
	return ""
}

// EncodeResource is the canonical document of a decoded resource: block YAML of the
// universal form (`type: Kind` beside the resource's fields) that mesh.Decode reads back to
// an equal resource. Map keys are sorted, so equal resources encode to equal bytes.
//
// The bytes are what sigs.k8s.io/yaml's JSONToYAML makes of the resource's JSON (the form
// every earlier control plane sent, so versions are unchanged across an upgrade), without
// its YAML parse of that JSON: the JSON is read with encoding/json, its numbers typed as
// go-yaml's resolver types them (int, then uint64, then float64), and the tree written as
// go-yaml writes it - by appendBlockYAML when it can tell (plain strings, times), else by
// go-yaml (TestEncodeResourceAsJSONToYAML compares them). A replica encodes every stored
// resource when it starts.
func EncodeResource(r mesh.Resource) ([]byte, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%s %q: encode: %w", strings.ToLower(r.Kind()), r.GetMeta().Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("%s %q: encode: %w", strings.ToLower(r.Kind()), r.GetMeta().Name, err)
	}
	fields["type"] = r.Kind()
	yamlTyped(fields)
	if out, ok := appendBlockYAML(make([]byte, 0, 2*len(body)), fields); ok {
		return bytes.Clone(out), nil
	}
	out, err := yaml2.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("%s %q: encode: %w", strings.ToLower(r.Kind()), r.GetMeta().Name, err)
	}
	return bytes.Clone(out), nil // the encoder's buffer grew by doubling: held as long as served
}

// yamlTyped is v with every json.Number typed as go-yaml's resolver types a plain number.
func yamlTyped(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = yamlTyped(e)
		}
	case []any:
		for i, e := range v {
			v[i] = yamlTyped(e)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 0, 64); err == nil {
			if i == int64(int(i)) {
				return int(i)
			}
			return i
		}
		if u, err := strconv.ParseUint(string(v), 0, 64); err == nil {
			return u
		}
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return f
		}
		return string(v)
	}
	return v
}

// Envelope wraps a resource's canonical document for the wire.
func Envelope(body []byte) *wrapperspb.BytesValue { return wrapperspb.Bytes(body) }

// DecodeResource reads one envelope's document back with mesh.DecodeFromControlPlane (the
// decoding and validation of files, the control plane's own kinds accepted: DNSZone) and
// checks that it holds exactly one resource of the kind and name (mesh.StoreName) it was
// sent as. Errors
// name the resource ("<kind>/<name> from the control plane") and the field.
//
// A resource kept names its source "control plane <kind>", a name shared by every resource
// of its kind: an agent holds 100,000 Dataplanes, and a source name of each its own
// ("control plane Dataplane/<name>") cost ~250 bytes a dataplane (the text and its entry in
// the process's table of source names) for what the resource's kind and name already say
// in every error about it. A document that fails to decode is decoded again under its own
// name, so that the errors name it.
func DecodeResource(kind, name string, body []byte) (mesh.Resource, error) {
	rs, err := mesh.DecodeFromControlPlane("control plane "+kind, body)
	source := func() string { return "control plane " + kind + "/" + name } // errors only
	if err != nil {
		if _, err2 := mesh.DecodeFromControlPlane(source(), body); err2 != nil {
			return nil, err2
		}
		return nil, err
	}
	if len(rs) != 1 {
		return nil, mesh.Errors{{Source: source(), Kind: kind, Name: name,
			Msg: fmt.Sprintf("the envelope must hold exactly one resource, found %d", len(rs))}}
	}
	r := rs[0]
	// A resource is sent under its stored name (a route's is name.namespace); a control
	// plane before that sent a route under its plain name, which is accepted too.
	if r.Kind() != kind || (mesh.StoreName(r) != name && r.GetMeta().Name != name) {
		return nil, mesh.Errors{{Source: source(), Kind: kind, Name: name,
			Msg: fmt.Sprintf("the envelope holds %s %q, not the %s it was sent as", r.Kind(), mesh.StoreName(r), kind)}}
	}
	m := r.GetMeta()
	m.Source = m.Source.WithDoc(0) // an envelope's one document: "#1" would tell nothing
	return r, nil
}
