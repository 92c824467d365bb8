package api

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// Print writes resources as a table (MESH NAME VERSION AGE), YAML or JSON.
func Print(w io.Writer, format string, rs []Resource, now time.Time) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if len(rs) == 1 {
			return enc.Encode(rs[0])
		}
		return enc.Encode(rs)
	case "yaml":
		for i, r := range rs {
			if i > 0 {
				fmt.Fprintln(w, "---")
			}
			var text string
			if json.Unmarshal(r.Spec, &text) == nil {
				// a document that is YAML only, served as its text: shown as written
				fmt.Fprint(w, strings.TrimSuffix(text, "\n")+"\n")
				continue
			}
			b, err := yaml.JSONToYAML(r.Spec)
			if err != nil {
				return err
			}
			w.Write(b)
		}
		return nil
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MESH\tTYPE\tNAME\tVERSION\tAGE")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.Mesh, r.Type, r.Name, r.Version, now.Sub(r.CreationTime).Round(time.Second))
		}
		return tw.Flush()
	}
	return fmt.Errorf("-o %q: want table, yaml or json", format)
}

// statusKeys are GET /status's fields in the order PrintStatus shows them: the store, then
// (etcd) the replica and its leader, then how far it has read.
var statusKeys = []string{"store", "dir", "replica", "leader", "isLeader", "storeRevision", "synced"}

// PrintStatus writes GET /status's body (JSON) as "key: value" lines: the fields this
// control plane reports, and only those (a directory store has no replica or leader), with
// numbers as written (a revision is an integer, never 1.8e+15).
func PrintStatus(w io.Writer, body io.Reader) error {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	var st map[string]any
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("GET /status: %w", err)
	}
	keys := slices.Clone(statusKeys)
	var rest []string
	for k := range st {
		if !slices.Contains(statusKeys, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range append(keys, rest...) {
		if v, ok := st[k]; ok {
			fmt.Fprintf(w, "%-14s %v\n", k+":", v)
		}
	}
	return nil
}
