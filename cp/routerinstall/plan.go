// Package routerinstall renders what runs a Router's replicas where the user runs things
// (`kuma-cp router install NAME`, as OpenShift's `oadm router` did): each replica is a
// gateway dataplane - a name, a token, an address its router's DNS answers, an inbound on
// the router's listener carrying the router's dataplanes tags - run by kuma-dp with Envoy.
// It renders the replicas' Dataplane resources for the store, the Kubernetes objects that
// run them (a Deployment per replica, a Service, a PodDisruptionBudget, anti-affinity, a
// Secret with their tokens and files), and a systemd unit per replica for VMs. It only
// renders: reading the Router is the API's, issuing tokens package token's, and the
// replicas' readiness package routerstatus's.
package routerinstall

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

// Options are what the rendering needs besides the Router.
type Options struct {
	// Router is the router whose replicas are rendered (its mesh in Router.Mesh).
	Router *mesh.Router
	// Addresses are where each replica is reached, one per replica (the router's replicas):
	// its router's DNS answers them.
	Addresses []string
	// ControlPlanes are the agents' --cp-address (grpcs://host:port), one or more.
	ControlPlanes []string
	// CACert is the control plane's CA certificate (PEM), which the agents trust.
	CACert string
	// Token issues a dataplane token for a replica's name (Kubernetes and systemd).
	Token func(name string) string
	// Namespace and Image are the Kubernetes namespace and the kuma-dp image (with Envoy).
	Namespace, Image string
	// Binary and Envoy are kuma-dp's and Envoy's paths on a VM.
	Binary, Envoy string
}

// Defaults of Options.
const (
	DefaultNamespace = "kuma-routers"
	DefaultImage     = "kuma-dp:latest"
	DefaultBinary    = "/usr/local/bin/kuma-dp"
	DefaultEnvoy     = "/usr/local/bin/envoy"
)

// Replica is one replica as rendered.
type Replica struct {
	Name, Address string
	// Tags are its inbound's tags: the router's dataplanes selector.
	Tags mesh.Tags
	Port uint32
}

// Replicas are the router's replicas, <router>-0 to <router>-(replicas-1), each at its
// address; an error names the field and value that cannot be rendered.
func Replicas(o Options) ([]Replica, error) {
	rt := o.Router
	if rt == nil {
		return nil, fmt.Errorf("no router")
	}
	n := rt.DesiredReplicas()
	if len(o.Addresses) != n {
		return nil, fmt.Errorf("router %s wants %d replicas (replicas): give one --address each, got %d (value %q)", rt.Name, n, len(o.Addresses), strings.Join(o.Addresses, ","))
	}
	if len(rt.Dataplanes) == 0 {
		return nil, fmt.Errorf("router %s: dataplanes: empty: its replicas are the dataplanes carrying these tags; give it some (e.g. {kuma.io/service: %s-gateway})", rt.Name, rt.Name)
	}
	for _, t := range rt.Dataplanes {
		if t.Value == mesh.Wildcard {
			return nil, fmt.Errorf("router %s: dataplanes: tag %s: the value %q selects; a replica needs a value of its own", rt.Name, t.Key, t.Value)
		}
	}
	port := rt.ListenerOf().Port
	out := make([]Replica, n)
	for i, a := range o.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("--address %q: not an IP address (replica %d of router %s)", a, i, rt.Name)
		}
		out[i] = Replica{Name: fmt.Sprintf("%s-%d", rt.Name, i), Address: ip.String(), Tags: rt.Dataplanes, Port: port}
	}
	if dup := duplicate(o.Addresses); dup != "" {
		return nil, fmt.Errorf("--address %q: given twice: each replica has an address of its own", dup)
	}
	return out, nil
}

func duplicate(s []string) string {
	seen := slices.Clone(s)
	slices.Sort(seen)
	for i := 1; i < len(seen); i++ {
		if seen[i] == seen[i-1] {
			return seen[i]
		}
	}
	return ""
}

// dataplane is a replica's Dataplane document at address (its store copy: the replica's
// address; the agent's own file: "{{ address }}", the pod's IP, advertising the replica's).
func dataplane(meshName string, r Replica, address string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "type: Dataplane\nmesh: %s\nname: %s\nnetworking:\n  address: %s\n", q(meshName), q(r.Name), address)
	if address != q(r.Address) {
		fmt.Fprintf(&b, "  advertisedAddress: %s\n", q(r.Address))
	}
	fmt.Fprintf(&b, "  inbound:\n  - port: %d\n    tags:\n", r.Port)
	for _, t := range r.Tags {
		fmt.Fprintf(&b, "      %s: %s\n", q(t.Key), q(t.Value))
	}
	return b.String()
}

// q is s as a YAML scalar that reads back as s (a JSON string).
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
