package routerstatus

import (
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

func decodeDocs(t *testing.T, doc string) []mesh.Resource {
	t.Helper()
	rs, err := mesh.Decode("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

const fixture = `type: Router
name: shard1
dns: shard1.apps.test
dataplanes: {kuma.io/service: gw}
---
type: Dataplane
name: gw-a
networking: {address: 10.0.0.1, inbound: [{port: 8080, tags: {kuma.io/service: gw}}]}
---
type: Dataplane
name: gw-b
networking: {address: 10.0.0.2, inbound: [{port: 8080, state: NotReady, tags: {kuma.io/service: gw}}]}
---
type: Dataplane
name: gw-c
networking: {address: 10.0.0.3, inbound: [{port: 8080, health: {ready: false}, tags: {kuma.io/service: gw}}]}
---
type: Dataplane
name: gw-kuma
networking: {address: 10.0.0.4, gateway: {type: BUILTIN, tags: {kuma.io/service: gw}}}
---
type: Dataplane
name: web
networking: {address: 10.0.0.9, inbound: [{port: 8080, tags: {kuma.io/service: web}}]}
`

// Each replica's readiness and its reason: the agent's stream, the inbound's own state and
// health; a Kuma gateway dataplane is a replica; a dataplane the selector misses is not.
func TestReplicas(t *testing.T) {
	rs := decodeDocs(t, fixture)
	rt := rs[0].(*mesh.Router)
	var dps []*mesh.Dataplane
	for _, r := range rs[1:] {
		dps = append(dps, r.(*mesh.Dataplane))
	}
	online := func(_, name string) bool { return name != "gw-kuma" }
	got := Replicas(rt, dps, online)
	want := []mesh.RouterReplica{
		{Name: "gw-a", Address: "10.0.0.1", Ready: true},
		{Name: "gw-b", Address: "10.0.0.2", Reason: ReasonInboundNotReady, Message: "networking.inbound[0] (port 8080): state NotReady"},
		{Name: "gw-c", Address: "10.0.0.3", Reason: ReasonInboundNotReady, Message: "networking.inbound[0] (port 8080): health.ready false"},
		{Name: "gw-kuma", Address: "10.0.0.4", Reason: ReasonAgentNotConnected, Message: notConnected},
	}
	if len(got) != len(want) {
		t.Fatalf("replicas %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("replica %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if r := Replicas(rt, dps, func(string, string) bool { return true }); !r[3].Ready {
		t.Errorf("a Kuma gateway dataplane whose agent is online: %+v", r[3])
	}
}

// The conditions: Available while one replica is ready, Degraded below the desired count
// naming the replicas not ready and why; none ready says the DNS is fail static; no
// replica at all says what to run; a condition keeps its transition time while it holds.
func TestCompute(t *testing.T) {
	rt := decodeDocs(t, fixture)[0].(*mesh.Router) // replicas: the default, 2
	ready := mesh.RouterReplica{Name: "gw-a", Address: "10.0.0.1", Ready: true}
	gone := mesh.RouterReplica{Name: "gw-b", Address: "10.0.0.2", Reason: ReasonAgentNotConnected, Message: notConnected}
	t0 := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	cond := func(s *mesh.RouterStatus, typ string) string {
		c := s.Condition(typ)
		return c.Status + " " + c.Reason + ": " + c.Message
	}
	both := Compute(rt, []mesh.RouterReplica{ready, ready}, nil, t0)
	if both.ReadyReplicas != 2 || both.DesiredReplicas != 2 ||
		cond(both, mesh.ConditionAvailable) != "True ReplicasReady: 2 of 2 desired replicas ready" ||
		cond(both, mesh.ConditionDegraded) != "False ReplicasReady: 2 of 2 desired replicas ready" {
		t.Errorf("both ready: %+v", both)
	}
	one := Compute(rt, []mesh.RouterReplica{ready, gone}, both, t0.Add(time.Minute))
	if cond(one, mesh.ConditionAvailable) != "True ReplicasReady: 1 of 2 desired replicas ready" ||
		cond(one, mesh.ConditionDegraded) != "True FewerReadyReplicas: 1 of 2 desired replicas ready; not ready: gw-b (AgentNotConnected)" {
		t.Errorf("one ready: %+v", one.Conditions)
	}
	if !one.Condition(mesh.ConditionAvailable).LastTransitionTime.Equal(t0) || !one.Condition(mesh.ConditionDegraded).LastTransitionTime.Equal(t0.Add(time.Minute)) {
		t.Errorf("transition times: %+v", one.Conditions)
	}
	none := Compute(rt, []mesh.RouterReplica{gone}, one, t0)
	if cond(none, mesh.ConditionAvailable) != "False NoReadyReplicas: no replica ready: its DNS keeps answering all 1 (fail static); not ready: gw-b (AgentNotConnected)" ||
		cond(none, mesh.ConditionDegraded) != "True FewerReadyReplicas: 0 of 2 desired replicas ready; 1 of 2 exist; not ready: gw-b (AgentNotConnected)" {
		t.Errorf("none ready: %+v", none.Conditions)
	}
	empty := Compute(rt, nil, nil, t0)
	if c := empty.Condition(mesh.ConditionAvailable); c.Status != "False" || c.Reason != ReasonNoReplicas || !strings.Contains(c.Message, "kuma-cp router install shard1") {
		t.Errorf("no replicas: %+v", c)
	}
	zero := 0
	rt.Replicas = &zero
	if c := Compute(rt, nil, nil, t0).Condition(mesh.ConditionDegraded); c.Status != "False" {
		t.Errorf("a router that wants no replica is not degraded: %+v", c)
	}
	many := make([]mesh.RouterReplica, 12)
	for i := range many {
		many[i] = gone
	}
	if m := Compute(rt, many, nil, t0).Condition(mesh.ConditionAvailable).Message; !strings.HasSuffix(m, " and 2 more") {
		t.Errorf("a long list is cut: %s", m)
	}
}

// A condition another writer put in the status (the route scheduler's DNS condition, naming
// the router that holds this router's dns) is kept as it is, so the two writers never undo
// each other's writes.
func TestComputeKeepsOtherConditions(t *testing.T) {
	rt := decodeDocs(t, fixture)[0].(*mesh.Router)
	dnsCond := mesh.RouteCondition{Type: "DNS", Status: "False", Reason: "RouterDNSInUse", Message: "dns held by router default/shard-b"}
	old := &mesh.RouterStatus{Conditions: []mesh.RouteCondition{dnsCond}}
	s := Compute(rt, nil, old, time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
	if c := s.Condition("DNS"); c == nil || *c != dnsCond || s.Condition(mesh.ConditionAvailable) == nil {
		t.Errorf("conditions %+v: want Available, Degraded and the DNS condition as it was", s.Conditions)
	}
}
