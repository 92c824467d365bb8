package gui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/mesh"
)

// The router shards' DNS zones as the control plane serves them (GET /zones): each zone's
// serial and records, each address record with the router replica it names.

type recordRow struct {
	Name, TTL, Type, Data, Replica string
}

type zoneView struct {
	ID, Origin, Replicas string
	Serial               uint32
	Records              []recordRow
}

type zonesData struct {
	Zones   []zoneView
	Missing string
}

func (s *Server) zones(ctx context.Context, _ *http.Request) (string, string, any, error) {
	zones, err := s.api.Zones(ctx)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return "DNS zones", "", zonesData{Missing: "This control plane serves no router shard DNS: " + ae.Details}, nil
	}
	if err != nil {
		return "", "", nil, err
	}
	replicas, err := s.replicaAddrs(ctx)
	if err != nil {
		return "", "", nil, err
	}
	var d zonesData
	for i, z := range zones {
		v := zoneView{ID: fmt.Sprint(i), Origin: z.Origin, Serial: z.Serial}
		var in []string
		for _, rec := range z.Records {
			row := recordRow{Data: rec}
			if rr, err := dns.NewRR(rec); err == nil && rr != nil {
				h := rr.Header()
				row = recordRow{Name: h.Name, TTL: fmt.Sprint(h.Ttl), Type: dns.TypeToString[h.Rrtype],
					Data: strings.TrimSpace(strings.TrimPrefix(rr.String(), h.String()))}
				if h.Rrtype == dns.TypeA || h.Rrtype == dns.TypeAAAA {
					row.Replica = replicas[row.Data]
					if row.Replica != "" && !slices.Contains(in, row.Replica) {
						in = append(in, row.Replica)
					}
				}
			}
			v.Records = append(v.Records, row)
		}
		v.Replicas = strings.Join(in, ", ")
		d.Zones = append(d.Zones, v)
	}
	return "DNS zones", "", d, nil
}

// replicaAddrs maps the address of every router replica of every mesh to its name.
func (s *Server) replicaAddrs(ctx context.Context) (map[string]string, error) {
	meshes, err := s.api.MeshInsights(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, mi := range meshes {
		if mi.Routers.Total == 0 {
			continue
		}
		routers, err := s.api.List(ctx, mi.Name, "routers")
		if err != nil {
			return nil, err
		}
		for _, res := range routers {
			x, err := decoded(res)
			rt, ok := x.(*mesh.Router)
			if err != nil || !ok {
				continue
			}
			reps, _, err := s.replicasOf(ctx, mi.Name, rt)
			if err != nil {
				return nil, err
			}
			for _, r := range reps {
				out[r.Address] = r.Name
			}
		}
	}
	return out, nil
}
