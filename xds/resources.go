package xds

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Options are the per-dataplane settings that shape the resources.
type Options struct {
	// TransparentProxy: traffic reaches Envoy through iptables redirection. Adds the capture
	// listeners and makes the VIP and inbound listeners virtual (bind_to_port false).
	TransparentProxy bool
	// OutboundPort and InboundPort are the capture listeners' ports (default 15001, 15006).
	OutboundPort, InboundPort uint32
	// IPv6: the capture listeners listen on [::] with IPv4 compatibility, so IPv6 connections
	// redirected by the transparent proxy reach the IPv6 VIP listeners too (the host must
	// have IPv6; Envoy refuses the listener otherwise).
	IPv6 bool
	// CABundle is the system CA bundle path (FindSystemCA), used for TLS origination to a
	// MeshExternalService that gives no CA.
	CABundle string
}

func (o Options) withDefaults() Options {
	if o.OutboundPort == 0 {
		o.OutboundPort = 15001
	}
	if o.InboundPort == 0 {
		o.InboundPort = 15006
	}
	return o
}

// Problem is one policy (or part of one) left out of the resources, with why. Problems are
// the status the agent reports; what they name never reaches Envoy.
type Problem struct {
	Kind, Name string
	// Field is the path inside the resource, e.g. "spec.tls.verification.clientCert".
	Field string
	Msg   string
}

func (p Problem) String() string {
	if p.Field != "" {
		return fmt.Sprintf("%s %q: %s: %s", p.Kind, p.Name, p.Field, p.Msg)
	}
	return fmt.Sprintf("%s %q: %s", p.Kind, p.Name, p.Msg)
}

// Resources is one generated set of Envoy resources, each slice sorted by name.
// Treat it as immutable once returned.
type Resources struct {
	Listeners []*listener.Listener
	Clusters  []*cluster.Cluster
	Endpoints []*endpoint.ClusterLoadAssignment
	Secrets   []*tlsv3.Secret
	// Problems lists the policies (or parts) left out because they cannot be expressed.
	Problems []Problem
	// Conflicts notes outbounds where several TrafficRoutes were equally specific and only
	// the creation time (or the name) chose the winner (the L4 TrafficRoute design, corner case F: make it
	// noticeable).
	Conflicts []string

	// packed maps the Anys the generation packed to their messages (see packedSet).
	packed map[*anypb.Any]proto.Message
	// trust, when set by a Generator, holds the messages already validated.
	trust *trustStore
	// checked is the result of the last Validate (Server.Update does not repeat it).
	checked atomic.Pointer[checkResult]
	// idx is the cross-reference index of a successful validation; delta, set by a
	// Generator, lets Validate check only the changes since a validated base.
	idx   atomic.Pointer[xrefIndex]
	delta *resDelta
}

// sort sorts each kind by name; the listeners (the most) beside the rest when large.
func (r *Resources) sort() {
	sortListeners := func() {
		slices.SortFunc(r.Listeners, func(a, b *listener.Listener) int { return strings.Compare(a.Name, b.Name) })
	}
	if len(r.Listeners) > 1000 && runtime.GOMAXPROCS(0) > 1 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			sortListeners()
		}()
		defer wg.Wait()
	} else {
		sortListeners()
	}
	slices.SortFunc(r.Clusters, func(a, b *cluster.Cluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(r.Endpoints, func(a, b *endpoint.ClusterLoadAssignment) int { return strings.Compare(a.ClusterName, b.ClusterName) })
	slices.SortFunc(r.Secrets, func(a, b *tlsv3.Secret) int { return strings.Compare(a.Name, b.Name) })
}
