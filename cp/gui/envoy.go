package gui

import (
	"bytes"
	"fmt"
	"strings"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/xds"
)

// The Envoy resources a dataplane would get, summarized for its page: each listener with
// its address and what it does (tcp_proxy to a cluster, or HTTP routes), each cluster with
// its endpoints, the routes of the HTTP listeners; what could not be expressed.

type listenerRow struct {
	Name, Address, Filters string
	Routes                 int
}

type clusterRow struct {
	Name, Type string
	Endpoints  int
}

type envoySummary struct {
	Listeners []listenerRow
	Clusters  []clusterRow
	Routes    []string
	Secrets   int
	Problems  []string
	Conflicts []string
	Err       string
}

// summarize is res as the page shows it; err is why there is none.
func summarize(res *xds.Resources, err error) envoySummary {
	var s envoySummary
	if err != nil || res == nil {
		s.Err = fmt.Sprint(err)
		return s
	}
	endpoints := map[string]int{}
	for _, cla := range res.Endpoints {
		for _, le := range cla.GetEndpoints() {
			endpoints[cla.GetClusterName()] += len(le.GetLbEndpoints())
		}
	}
	for _, c := range res.Clusters {
		n := endpoints[c.GetName()]
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			n += len(le.GetLbEndpoints())
		}
		s.Clusters = append(s.Clusters, clusterRow{Name: c.GetName(), Type: strings.ToLower(c.GetType().String()), Endpoints: n})
	}
	for _, l := range res.Listeners {
		row := listenerRow{Name: l.GetName()}
		if sa := l.GetAddress().GetSocketAddress(); sa != nil {
			row.Address = fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
		}
		var filters []string
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				filters = append(filters, strings.TrimPrefix(f.GetName(), "envoy.filters.network."))
				var m hcm.HttpConnectionManager
				if tc := f.GetTypedConfig(); tc != nil && tc.MessageIs(&m) && tc.UnmarshalTo(&m) == nil {
					for _, vh := range m.GetRouteConfig().GetVirtualHosts() {
						for _, rt := range vh.GetRoutes() {
							row.Routes++
							s.Routes = append(s.Routes, fmt.Sprintf("%s: %s %s", l.GetName(), vh.GetName(), routeText(rt.GetMatch().GetPrefix(), rt.GetMatch().GetPath(), rt.GetRoute().GetCluster())))
						}
					}
				}
			}
		}
		row.Filters = strings.Join(uniq(filters), ", ")
		s.Listeners = append(s.Listeners, row)
	}
	s.Secrets = len(res.Secrets)
	for _, p := range res.Problems {
		s.Problems = append(s.Problems, fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Name, p.Field, p.Msg))
	}
	s.Conflicts = res.Conflicts
	return s
}

func routeText(prefix, path, cluster string) string {
	m := "prefix " + prefix
	if path != "" {
		m = "path " + path
	}
	if cluster == "" {
		return m + " (weighted clusters)"
	}
	return m + " -> " + cluster
}

func uniq(ss []string) []string {
	var out []string
	for _, s := range ss {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// envoyDocument is res as one JSON document: {"listeners", "clusters", "endpoints"}, each
// message as protojson writes it. Secrets are never written.
func envoyDocument(res *xds.Resources) ([]byte, error) {
	var b bytes.Buffer
	opts := protojson.MarshalOptions{Indent: "  "}
	part := func(name string, msgs []proto.Message, last bool) error {
		fmt.Fprintf(&b, "  %q: [", name)
		for i, m := range msgs {
			j, err := opts.Marshal(m)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n")
			b.Write(j)
		}
		b.WriteString("]")
		if !last {
			b.WriteString(",")
		}
		b.WriteString("\n")
		return nil
	}
	b.WriteString("{\n")
	if err := part("listeners", messages(res.Listeners), false); err != nil {
		return nil, err
	}
	if err := part("clusters", messages(res.Clusters), false); err != nil {
		return nil, err
	}
	if err := part("endpoints", messages(res.Endpoints), true); err != nil {
		return nil, err
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func messages[T proto.Message](ms []T) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// toYAML is doc as YAML (its JSON's text when it cannot be).
func toYAML(doc any) string {
	b, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Sprint(doc)
	}
	return string(b)
}
