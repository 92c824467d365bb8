package api

import (
	"encoding/json"
	"fmt"
	"io"
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
