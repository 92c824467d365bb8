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

// InspectedDataplane is one row of `inspect dataplanes` in -o json/yaml.
type InspectedDataplane struct {
	Mesh     string   `json:"mesh"`
	Name     string   `json:"name"`
	Status   string   `json:"status"` // Online or Offline
	Replicas []string `json:"replicas,omitempty"`
}

// inspected joins the dataplanes with the agents connected now.
func inspected(dataplanes []Resource, agents []Agent) []InspectedDataplane {
	type key struct{ mesh, name string }
	on := make(map[key][]string, len(agents))
	for _, a := range agents {
		on[key{a.Mesh, a.Name}] = append([]string{}, a.Replicas...)
	}
	out := make([]InspectedDataplane, len(dataplanes))
	for i, r := range dataplanes {
		out[i] = InspectedDataplane{Mesh: r.Mesh, Name: r.Name, Status: "Offline"}
		if ids, ok := on[key{r.Mesh, r.Name}]; ok {
			out[i].Status, out[i].Replicas = "Online", ids
		}
	}
	return out
}

// PrintInspectDataplanes is `inspect dataplanes`: each dataplane's MESH NAME TAGS, STATUS
// (Online: its agent holds a stream to a replica now, else Offline), the REPLICAS it is
// connected to (etcd) and AGE, as get's.
func PrintInspectDataplanes(w io.Writer, dataplanes []Resource, agents []Agent, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MESH\tNAME\tTAGS\tSTATUS\tREPLICAS\tAGE")
	for i, row := range inspected(dataplanes, agents) {
		tags, _ := dataplaneColumns(dataplanes[i])
		replicas := "-"
		if len(row.Replicas) > 0 {
			replicas = strings.Join(row.Replicas, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Mesh, row.Name, tags, row.Status, replicas, Age(modified(dataplanes[i]), now))
	}
	return tw.Flush()
}

// PrintInspectDataplanesAs is PrintInspectDataplanes in format (table, json or yaml): the
// json and yaml forms are {total, items: [{mesh, name, status, replicas}]}, as kumactl's
// inspect prints its rows for scripts.
func PrintInspectDataplanesAs(w io.Writer, format string, dataplanes []Resource, agents []Agent, now time.Time) error {
	if format == "" || format == "table" {
		return PrintInspectDataplanes(w, dataplanes, agents, now)
	}
	if err := CheckFormat(format); err != nil {
		return err
	}
	rows := inspected(dataplanes, agents)
	doc := struct {
		Total int                  `json:"total"`
		Items []InspectedDataplane `json:"items"`
	}{len(rows), rows}
	return printDoc(w, format, doc)
}
