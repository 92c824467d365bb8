package gui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/kumadp/kuma-dp/cp/api"
)

// The overview: every mesh with its counts, and the control plane (GET /status, as it is:
// fields added to the status show without a change here) with the agents per replica.

// field is one entry of the status, as text.
type field struct{ Key, Value string }

// replicaAgents is how many agents hold a stream to one replica.
type replicaAgents struct {
	Replica string
	Agents  int
	Leader  bool
}

type overviewData struct {
	Meshes       []api.MeshInsight
	PolicyKinds  []string
	KindTitles   map[string]string
	Status       []field
	Store        string
	Leader       string
	Replicas     []replicaAgents
	AgentsTotal  int
	StatusFailed string
}

func (s *Server) overview(ctx context.Context, _ *http.Request) (string, string, any, error) {
	meshes, err := s.api.MeshInsights(ctx)
	if err != nil {
		return "", "", nil, err
	}
	d := overviewData{Meshes: meshes, PolicyKinds: api.PolicyKinds, KindTitles: kindTitles}
	raw, err := s.api.Status(ctx)
	status := map[string]any{}
	if err == nil {
		err = json.Unmarshal(raw, &status)
	}
	if err != nil {
		d.StatusFailed = err.Error() // the meshes are worth showing still
	}
	d.Status = fields(status)
	d.Store, _ = status["store"].(string)
	if d.Store == "" {
		d.Store = "etcd"
	}
	d.Leader, _ = status["leader"].(string)
	agents, err := s.api.Agents(ctx)
	if err != nil {
		return "", "", nil, err
	}
	d.AgentsTotal = len(agents)
	d.Replicas = perReplica(agents, status)
	return "Overview", "", d, nil
}

// fields is the status as sorted key/value text; nested values as JSON.
func fields(m map[string]any) []field {
	out := make([]field, 0, len(m))
	for k, v := range m {
		var text string
		switch v := v.(type) {
		case string:
			text = v
		case nil:
			text = "-"
		default:
			b, _ := json.Marshal(v)
			text = string(b)
		}
		out = append(out, field{k, text})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// perReplica counts the agents of each replica: those the agents name and those the status
// names (this one, the leader, every replica alive), with none when none is connected. The directory store's one control
// plane names no replica: its agents are counted under "this control plane".
func perReplica(agents []api.Agent, status map[string]any) []replicaAgents {
	count := map[string]int{}
	for _, a := range agents {
		if len(a.Replicas) == 0 {
			count["this control plane"]++
		}
		for _, r := range a.Replicas {
			count[r]++
		}
	}
	leader, _ := status["leader"].(string)
	known := []string{leader}
	if id, _ := status["replica"].(string); id != "" {
		known = append(known, id)
	}
	if all, _ := status["replicas"].(string); all != "" { // every replica alive (etcd)
		known = append(known, strings.Split(all, ", ")...)
	}
	for _, id := range known {
		if id != "" {
			count[id] += 0
		}
	}
	out := make([]replicaAgents, 0, len(count))
	for r, n := range count {
		out = append(out, replicaAgents{Replica: r, Agents: n, Leader: r == leader})
	}
	slices.SortFunc(out, func(a, b replicaAgents) int { return strings.Compare(a.Replica, b.Replica) })
	return out
}

// kindTitles are the policy kinds as the overview's columns name them (short enough for
// 1280 pixels).
var kindTitles = map[string]string{"VirtualOutbound": "Virtual outbounds", "TrafficRoute": "Traffic routes",
	"MeshExternalService": "External services", "HostnameGenerator": "Hostname generators",
	"MeshService": "Mesh services", "MeshTCPRoute": "TCP routes", "MeshHTTPRoute": "HTTP routes"}

// policyCount is a mesh insight's count of one kind.
func policyCount(mi api.MeshInsight, kind string) int { return mi.Policies[kind].Total }

// pathOf is a GUI path with each part escaped.
func pathOf(parts ...string) string {
	var b strings.Builder
	b.WriteString(Prefix)
	for _, p := range parts {
		fmt.Fprintf(&b, "/%s", escapePart(p))
	}
	return b.String()
}
