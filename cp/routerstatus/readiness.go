// Package routerstatus owns a router replica's readiness - the one definition that the
// control plane's shard DNS serves and that its views, conditions and metrics show - and the
// Router status that carries it. The leader computes, for every Router, its replicas (the
// dataplanes mesh.Router.Replica selects, Kuma's gateway dataplanes included), whether each
// is ready and why not, ready/desired, and the conditions Available and Degraded, and writes
// them into the Router's status (compare-and-set; only when they change). Every replica's DNS
// zones are built from that status (package shardzones), `kuma-cp get routers` and
// `describe router` print it, kuma_cp_router_replicas counts it: what is shown is what is
// served. Answering DNS is authdns's; which agents hold a stream is fanout's and the
// replicas' presence (package store).
package routerstatus

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/mesh"
)

// Online reports whether the agent of dataplane (mesh, name) holds a stream to any
// control-plane replica now.
type Online func(meshName, name string) bool

// Why a replica is not ready.
const (
	// ReasonAgentNotConnected: no agent of the dataplane holds a stream to any control-plane
	// replica (never started, stopped, killed, frozen or cut off).
	ReasonAgentNotConnected = "AgentNotConnected"
	// ReasonInboundNotReady: the gateway inbound says it is not ready (state NotReady, or
	// health.ready false).
	ReasonInboundNotReady = "InboundNotReady"
	// ReasonNoAddress: the dataplane's address is no IP address the DNS could answer.
	ReasonNoAddress = "NoAddress"
)

// The conditions' reasons.
const (
	ReasonReplicasReady      = "ReplicasReady"      // Available True; Degraded False
	ReasonNoReadyReplicas    = "NoReadyReplicas"    // Available False: replicas, none ready
	ReasonNoReplicas         = "NoReplicas"         // Available False: no dataplane selected
	ReasonFewerReadyReplicas = "FewerReadyReplicas" // Degraded True
)

// notConnected is the message of a replica whose agent holds no stream.
const notConnected = "no agent of this dataplane holds a stream to a control-plane replica (not started, stopped, frozen or cut off)"

// Replicas are rt's replicas among dps (of rt's mesh), sorted by name, each with its
// address as the DNS answers it and its readiness: ready when its address is an IP, its
// gateway inbound is not marked not ready, and its agent is online.
func Replicas(rt *mesh.Router, dps []*mesh.Dataplane, online Online) []mesh.RouterReplica {
	var out []mesh.RouterReplica
	for _, dp := range dps {
		if dp.Mesh != rt.Mesh {
			continue
		}
		if in, ok := rt.Replica(dp); ok {
			out = append(out, Replica(dp, in, online))
		}
	}
	slices.SortFunc(out, func(a, b mesh.RouterReplica) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Replica is dp's readiness as a replica whose inbound (or mesh.GatewayInbound) the
// router's selector matched.
func Replica(dp *mesh.Dataplane, inbound int, online Online) mesh.RouterReplica {
	r := mesh.RouterReplica{Name: dp.Name, Address: Address(dp)}
	if _, err := netip.ParseAddr(r.Address); err != nil {
		r.Reason, r.Message = ReasonNoAddress, fmt.Sprintf("networking.address %q is not an IP address", r.Address)
		return r
	}
	if inbound >= 0 {
		in := dp.Networking.Inbound[inbound]
		if in.State() == mesh.InboundNotReady {
			r.Reason, r.Message = ReasonInboundNotReady, fmt.Sprintf("networking.inbound[%d] (port %d): state %s", inbound, in.Port, mesh.InboundNotReady)
			return r
		}
		if h := in.Health(); h != nil && !h.Ready {
			r.Reason, r.Message = ReasonInboundNotReady, fmt.Sprintf("networking.inbound[%d] (port %d): health.ready false", inbound, in.Port)
			return r
		}
	}
	if online == nil || !online(dp.Mesh, dp.Name) {
		r.Reason, r.Message = ReasonAgentNotConnected, notConnected
		return r
	}
	r.Ready = true
	return r
}

// Address is the address a replica is answered with: its advertised address, or its
// address.
func Address(dp *mesh.Dataplane) string {
	if a := dp.Networking.AdvertisedAddress(); a != "" {
		return a
	}
	return dp.Networking.Address
}

// Compute is rt's status with these replicas: ready/desired and the conditions, each
// keeping old's lastTransitionTime while its status stays (now otherwise); old's conditions
// of other types (the scheduler's DNS condition) are kept as they are.
func Compute(rt *mesh.Router, replicas []mesh.RouterReplica, old *mesh.RouterStatus, now time.Time) *mesh.RouterStatus {
	s := &mesh.RouterStatus{DesiredReplicas: rt.DesiredReplicas(), Replicas: replicas}
	var notReady []string
	for _, r := range replicas {
		if r.Ready {
			s.ReadyReplicas++
		} else {
			notReady = append(notReady, r.Name+" ("+r.Reason+")")
		}
	}
	counts := fmt.Sprintf("%d of %d desired replicas ready", s.ReadyReplicas, s.DesiredReplicas)
	avail := mesh.RouteCondition{Type: mesh.ConditionAvailable, Status: "True", Reason: ReasonReplicasReady, Message: counts}
	switch {
	case len(replicas) == 0 && len(rt.Dataplanes) == 0:
		avail.Status, avail.Reason, avail.Message = "False", ReasonNoReplicas, "the router has no dataplanes selector: it has no replicas and its DNS answers no address"
	case len(replicas) == 0:
		avail.Status, avail.Reason, avail.Message = "False", ReasonNoReplicas,
			fmt.Sprintf("no dataplane matches dataplanes %s (an inbound's tags, or a gateway's): its DNS answers no address (kuma-cp router install %s prints what runs them)", rt.Dataplanes, rt.Name)
	case s.ReadyReplicas == 0:
		avail.Status, avail.Reason, avail.Message = "False", ReasonNoReadyReplicas,
			fmt.Sprintf("no replica ready: its DNS keeps answering all %d (fail static); not ready: %s", len(replicas), errtext.List(notReady, maxListed))
	}
	degr := mesh.RouteCondition{Type: mesh.ConditionDegraded, Status: "False", Reason: ReasonReplicasReady, Message: counts}
	if s.ReadyReplicas < s.DesiredReplicas {
		degr.Status, degr.Reason = "True", ReasonFewerReadyReplicas
		if len(replicas) < s.DesiredReplicas {
			degr.Message += fmt.Sprintf("; %d of %d exist", len(replicas), s.DesiredReplicas)
		}
		if len(notReady) > 0 {
			degr.Message += "; not ready: " + errtext.List(notReady, maxListed)
		}
	}
	for _, c := range []*mesh.RouteCondition{&avail, &degr} {
		c.LastTransitionTime = now.UTC().Truncate(time.Second)
		if prev := old.Condition(c.Type); prev != nil && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		}
	}
	s.Conditions = []mesh.RouteCondition{avail, degr}
	if old != nil { // another writer's conditions (the scheduler's DNS) are kept as they are
		for _, c := range old.Conditions {
			if c.Type != mesh.ConditionAvailable && c.Type != mesh.ConditionDegraded {
				s.Conditions = append(s.Conditions, c)
			}
		}
	}
	return s
}

// maxListed is how many replicas a condition's message names.
const maxListed = 10
