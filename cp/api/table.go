package api

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/kumadp/kuma-dp/mesh"
)

// Table writes resources of type typ (the URL's) as kumactl's table: dataplanes as MESH
// NAME TAGS ADDRESS AGE, routes as PrintRoutes, every other type as MESH NAME AGE (a
// router's view, PrintRouters, needs the routes and dataplanes too). An empty list is the header alone, as kumactl's.
// AGE is since the last modification, as kumactl's (Age).
func Table(w io.Writer, typ string, rs []Resource, now time.Time) error {
	if typ == "routes" {
		return PrintRoutes(w, rs, now)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if typ == "dataplanes" {
		fmt.Fprintln(tw, "MESH\tNAME\tTAGS\tADDRESS\tAGE")
		for _, r := range rs {
			tags, address := dataplaneColumns(r)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Mesh, r.Name, tags, address, Age(modified(r), now))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "MESH\tNAME\tAGE")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Mesh, r.Name, Age(modified(r), now))
	}
	return tw.Flush()
}

// modified is a resource's last modification time (its creation when the store has none).
func modified(r Resource) time.Time {
	if r.ModificationTime.IsZero() {
		return r.CreationTime
	}
	return r.ModificationTime
}

// Age is the time since t as kumactl writes it: whole seconds under a minute, then minutes,
// hours, days, years (the largest unit, truncated); a time ahead of now (clocks apart) is 0s.
func Age(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 365*24*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return fmt.Sprintf("%dy", int(d.Hours()/24/365))
}

// dataplaneColumns are a dataplane's TAGS (the tags of every inbound and of its gateway:
// key=value, keys sorted, a key's values sorted and joined by commas, space-separated) and
// ADDRESS (the advertised address when set, else the address); "-" each when the document
// does not decode.
func dataplaneColumns(r Resource) (tags, address string) {
	dps := decodeAs[*mesh.Dataplane]([]Resource{r})
	if len(dps) == 0 {
		return "-", "-"
	}
	n := dps[0].Networking
	values := map[string]map[string]bool{}
	add := func(m map[string]string) {
		for k, v := range m {
			if values[k] == nil {
				values[k] = map[string]bool{}
			}
			values[k][v] = true
		}
	}
	for _, in := range n.Inbound {
		add(in.Tags.Map())
	}
	if gw := gatewayTags(n); gw != nil {
		add(gw)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys) // by key, whether shown quoted or not
	var pairs []string
	for _, k := range keys {
		var list []string
		for v := range values[k] {
			list = append(list, v)
		}
		sort.Strings(list)
		pairs = append(pairs, tagText(k)+"="+tagText(strings.Join(list, ",")))
	}
	address = n.AdvertisedAddress()
	if address == "" {
		address = n.Address
	}
	if len(pairs) == 0 {
		return "-", address
	}
	return strings.Join(pairs, " "), address
}

// gatewayTags are the tags of a gateway dataplane's networking.gateway (nil when it is none),
// values as the API takes them: text, or what YAML read as a number or a boolean (version:
// 2) - a map of strings refused the whole map, and TAGS showed none.
func gatewayTags(n mesh.Networking) map[string]string {
	if n.NetworkingExtra == nil || len(n.Gateway) == 0 {
		return nil
	}
	var gw struct {
		Tags map[string]any `json:"tags"`
	}
	if json.Unmarshal(n.Gateway, &gw) != nil {
		return nil
	}
	tags := make(map[string]string, len(gw.Tags))
	for k, v := range gw.Tags {
		switch v.(type) {
		case string, float64, bool:
			tags[k] = fmt.Sprint(v)
		}
	}
	return tags
}

// tagText is a tag's key or value as TAGS shows it: quoted (Go's syntax) when it holds
// whitespace or a character that is not printable, which would split the cell or the table
// (the API takes a key with a tab or a newline).
func tagText(s string) string {
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
