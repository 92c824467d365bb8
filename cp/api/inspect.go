package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Agent is a dataplane whose agent holds a stream to a replica now, and those replicas
// (none named on the directory store: its one control plane).
type Agent struct {
	Mesh     string   `json:"mesh"`
	Name     string   `json:"name"`
	Replicas []string `json:"replicas,omitempty"`
}

// Agents is GET /agents: every dataplane whose agent is connected now, to any replica.
type Agents struct {
	Total int     `json:"total"`
	Items []Agent `json:"items"`
}

// MergeAgents is the agents connected to this replica (local, "mesh/name", named replica
// unless "") and to the others (others: "mesh/name" -> the replicas), sorted by mesh and
// name.
func MergeAgents(local []string, replica string, others map[string][]string) []Agent {
	all := map[string][]string{}
	for _, n := range local {
		all[n] = nil
		if replica != "" {
			all[n] = []string{replica}
		}
	}
	for n, ids := range others {
		all[n] = append(all[n], ids...)
	}
	out := make([]Agent, 0, len(all))
	for n, ids := range all {
		meshName, name, ok := strings.Cut(n, "/")
		if !ok {
			continue
		}
		slices.Sort(ids)
		out = append(out, Agent{Mesh: meshName, Name: name, Replicas: slices.Compact(ids)})
	}
	slices.SortFunc(out, func(a, b Agent) int {
		if c := strings.Compare(a.Mesh, b.Mesh); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func (s *Server) agents(w http.ResponseWriter, _ *http.Request) {
	if s.Agents == nil {
		fail(w, http.StatusNotFound, "no agents", "this control plane does not report its agents")
		return
	}
	items := s.Agents()
	if items == nil {
		items = []Agent{}
	}
	writeJSON(w, http.StatusOK, Agents{Total: len(items), Items: items})
}

// Agents returns the dataplanes whose agents are connected now (GET /agents).
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var l Agents
	if _, err := c.do(ctx, http.MethodGet, "/agents", nil, 0, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// PrintInspectDataplanes is `inspect dataplanes`: each dataplane's MESH NAME TAGS, STATUS
// (Online: its agent holds a stream to a replica now, else Offline), the REPLICAS it is
// connected to (etcd) and AGE, as get's.
func PrintInspectDataplanes(w io.Writer, dataplanes []Resource, agents []Agent, now time.Time) error {
	type key struct{ mesh, name string }
	on := make(map[key][]string, len(agents))
	for _, a := range agents {
		on[key{a.Mesh, a.Name}] = append([]string{}, a.Replicas...)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MESH\tNAME\tTAGS\tSTATUS\tREPLICAS\tAGE")
	for _, r := range dataplanes {
		tags, _ := dataplaneColumns(r)
		status, replicas := "Offline", "-"
		if ids, ok := on[key{r.Mesh, r.Name}]; ok {
			status = "Online"
			if len(ids) > 0 {
				replicas = strings.Join(ids, ",")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Mesh, r.Name, tags, status, replicas, Age(modified(r), now))
	}
	return tw.Flush()
}
