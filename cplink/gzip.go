package cplink

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Compressed first syncs (docs/cplink.md). A stream that holds nothing is answered with
// every resource of each kind: 3.4 MB of Dataplanes per agent in a mesh of 10,000, sent to
// every agent of a fleet reconnecting at once. An agent that lists FeatureGzipResources in
// its node's client_features may be sent such an answer compressed: the response's
// resources are then one Resource (GzipResourcesName) whose Any, of type
// GzipResourcesTypeURL, holds the gzip of an encoded DeltaDiscoveryResponse carrying the
// resources (and removals) it stands for. A control plane compresses a mesh's answer once
// per version and sends the same bytes to every agent that takes it; an agent that does not
// list the feature (an earlier kuma-dp) is sent the resources as they are.

// FeatureGzipResources is the client feature (node.client_features) of an agent that takes
// compressed resources.
const FeatureGzipResources = "kuma-dp.io/gzip-resources"

// GzipResourcesTypeURL is the type URL of the Any holding a response's resources compressed;
// GzipResourcesName is the name of the Resource carrying it.
const (
	GzipResourcesTypeURL = "kuma-dp.io/link.GzipResources"
	GzipResourcesName    = "kuma-dp.io/gzip-resources"
)

// GzipResponse is the encoded response standing for encoded (an encoded
// DeltaDiscoveryResponse of typeURL at version), its resources compressed. Compression
// is gzip at its default level: 6.8x for a mesh's Dataplanes, against 5.8x at its fastest
// level, for 40 ms instead of 20 ms per 3.4 MB, paid once per version however many agents
// take it (the bytes saved are copied once per agent).
func GzipResponse(encoded []byte, typeURL, version string) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.DefaultCompression) // a valid level: no error
	_, _ = w.Write(encoded)                                  // a bytes.Buffer does not fail
	_ = w.Close()
	out, _ := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: typeURL, SystemVersionInfo: version,
		Resources: []*discovery.Resource{{Name: GzipResourcesName, Resource: &anypb.Any{TypeUrl: GzipResourcesTypeURL, Value: b.Bytes()}}}})
	return out // made of strings and bytes: cannot fail
}

// errTooLarge is a compressed resource whose content exceeds the link's limit.
var errTooLarge = errors.New("refused: more than the link takes (a compression bomb?)")

// gunzipResources replaces, in resp, each compressed Resource with the resources and
// removals it holds. The decompressed content of each may be limit bytes at most: a larger
// one (a compression bomb) is refused with an error saying so, before more is read.
func gunzipResources(resp *discovery.DeltaDiscoveryResponse, limit int64) error {
	var out []*discovery.Resource
	found := false
	for _, r := range resp.GetResources() {
		if r.GetResource().GetTypeUrl() != GzipResourcesTypeURL {
			out = append(out, r)
			continue
		}
		found = true
		inner, err := gunzipResponse(r.GetResource().GetValue(), limit)
		if err != nil {
			return fmt.Errorf("resource %q (%s): %w", r.GetName(), GzipResourcesTypeURL, err)
		}
		if t := inner.GetTypeUrl(); t != "" && t != resp.GetTypeUrl() {
			return fmt.Errorf("resource %q (%s): holds resources of type URL %q in a response of %q", r.GetName(), GzipResourcesTypeURL, t, resp.GetTypeUrl())
		}
		out = append(out, inner.GetResources()...)
		resp.RemovedResources = append(resp.RemovedResources, inner.GetRemovedResources()...)
	}
	if found {
		resp.Resources = out
	}
	return nil
}

// gunzipResponse decompresses and decodes one compressed DeltaDiscoveryResponse of at most
// limit bytes.
func gunzipResponse(gz []byte, limit int64) (*discovery.DeltaDiscoveryResponse, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%d bytes that decompress to more than %d: %w", len(gz), limit, errTooLarge)
	}
	inner := &discovery.DeltaDiscoveryResponse{}
	if err := proto.Unmarshal(raw, inner); err != nil {
		return nil, fmt.Errorf("the decompressed content is not a DeltaDiscoveryResponse: %w", err)
	}
	return inner, nil
}
