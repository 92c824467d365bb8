package api

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Print writes a list of resources of type typ (the URL's) as a table (kumactl's columns,
// Table), YAML (one document each: what apply reads back) or JSON (a List, {"total": N,
// "items": [...]}, as the API gives a page, whatever the count).
func Print(w io.Writer, format, typ string, rs []Resource, now time.Time) error {
	if format == "json" {
		return printJSON(w, List{Total: len(rs), Items: append([]Resource{}, rs...)})
	}
	return printAs(w, format, typ, rs, now)
}

// PrintOne writes one resource (get TYPE NAME): in JSON the resource itself.
func PrintOne(w io.Writer, format string, r Resource, now time.Time) error {
	if format == "json" {
		return printJSON(w, r)
	}
	return printAs(w, format, r.Type, []Resource{r}, now)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printDoc writes v as JSON (indented) or, for "yaml", as the YAML of its JSON form.
func printDoc(w io.Writer, format string, v any) error {
	if format == "json" {
		return printJSON(w, v)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b, err := yaml.JSONToYAML(j)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func printAs(w io.Writer, format, typ string, rs []Resource, now time.Time) error {
	switch format {
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
		return Table(w, typ, rs, now)
	}
	return fmt.Errorf("-o %q: want table, yaml or json", format)
}

// statusKeys are GET /status's fields in the order PrintStatus shows them: the store, then
// (etcd) the replica and its leader, then how far it has read.
var statusKeys = []string{"store", "dir", "replica", "leader", "isLeader", "storeRevision", "synced"}

// decodeStatus reads GET /status's body (JSON), numbers as written.
func decodeStatus(body io.Reader) (map[string]any, error) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	var st map[string]any
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("GET /status: %w", err)
	}
	return st, nil
}

// PrintStatus writes GET /status's body (JSON) as "key: value" lines: the fields this
// control plane reports, and only those (a directory store has no replica or leader), with
// numbers as written (a revision is an integer, never 1.8e+15).
func PrintStatus(w io.Writer, body io.Reader) error {
	st, err := decodeStatus(body)
	if err != nil {
		return err
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
