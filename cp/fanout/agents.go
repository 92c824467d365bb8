package fanout

import (
	"context"
	"slices"
	"time"
)

// AgentNames are the dataplanes whose agents hold a stream to this replica now, as
// "mesh/name", sorted (kuma-cp inspect dataplanes: Online).
func (cp *ControlPlane) AgentNames() []string {
	cp.smu.Lock()
	out := make([]string, 0, len(cp.agents))
	for id := range cp.agents {
		out = append(out, id.Mesh+"/"+id.Name)
	}
	cp.smu.Unlock()
	slices.Sort(out)
	return out
}

// agentsChanged is the count of agents' arrivals and departures, for ShareAgents to skip
// the unchanged.
func (cp *ControlPlane) agentsChanged() uint64 {
	cp.smu.Lock()
	defer cp.smu.Unlock()
	return cp.agentsGen
}

// Publisher takes the names this replica holds (store.Presence shares them with the others).
type Publisher interface{ Publish(names []string) }

// ShareAgents hands AgentNames to pub now and, at most every interval, whenever an agent
// came or went, until ctx ends: every replica then knows which agents hold a stream to
// any (one publish a tick however many agents connect at once).
func (cp *ControlPlane) ShareAgents(ctx context.Context, pub Publisher, every time.Duration) {
	seen := cp.agentsChanged()
	pub.Publish(cp.AgentNames())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if g := cp.agentsChanged(); g != seen {
			seen = g
			pub.Publish(cp.AgentNames())
		}
	}
}
