package mesh

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Kuma writes a TrafficRoute's conf as a mapping (its TrafficRoute.Conf message):
//
//	conf:
//	  split:                      # or destination: {kuma.io/service: backend}
//	  - weight: 90
//	    destination: {kuma.io/service: backend, version: v1}
//	  loadBalancer: {roundRobin: {}}
//
// and every Kuma mesh starts with such a route (route-all-<mesh>: sources, destinations and
// conf.destination all `kuma.io/service: '*'`). The L4 TrafficRoute design writes conf as
// the list of weighted destinations itself. kumaRouteConf reads Kuma's form into the
// design's: split is the list, destination one entry of weight 1, and loadBalancer is kept
// (TrafficRoute.LoadBalancer). conf.http (Kuma's HTTP matching and rewriting) is refused:
// kuma-dp's Envoy routes TCP connections, and serving a route without its HTTP rules would
// send the requests they match elsewhere than their author meant.
//
// A wildcard service in a destination (`kuma.io/service: '*'`, as in route-all) is, as in
// Kuma, the service the connection was for.

// kumaLoadBalancers are the types of Kuma's conf.loadBalancer.
var kumaLoadBalancers = []string{"roundRobin", "leastRequest", "ringHash", "random", "maglev"}

// kumaRouteConf rewrites m's conf (m is the resource's body: the document in the
// universal form, spec in the Kubernetes form; prefix is its path) from Kuma's form to the
// design's, reporting what cannot be read. kuma says whether conf was in Kuma's form, and
// single whether it gave one destination rather than a split.
func (d *decoder) kumaRouteConf(m map[string]any, prefix string) (kuma, single bool) {
	c, ok := m["conf"].(map[string]any)
	if !ok {
		return false, false
	}
	split, hasSplit := c["split"]
	dest, hasDest := c["destination"]
	switch {
	case hasSplit && hasDest:
		d.errorf(prefix+"conf.destination", "", "give split or destination, not both")
		m["conf"] = split
	case hasSplit:
		m["conf"] = split
	case hasDest:
		m["conf"] = []any{map[string]any{"weight": json.Number("1"), "destination": dest}}
		single = true
	default:
		d.errorf(prefix+"conf", "", "needs split (weighted destinations) or destination")
		delete(m, "conf")
	}
	for _, k := range sortedKeys(c) {
		switch k {
		case "split", "destination":
		case "loadBalancer":
			if _, both := m["loadBalancer"]; both {
				d.errorf(prefix+"loadBalancer", "", "give the load balancer in conf only")
			}
			m["loadBalancer"] = c[k]
		case "http":
			d.errorf(prefix+"conf.http", "", "HTTP rules are not supported: kuma-dp routes TCP connections (the L4 TrafficRoute); "+
				"give the split for all of the service's traffic, or keep this route at a Kuma control plane")
		default:
			d.unknown(prefix+"conf."+k, k, []string{"split", "destination", "loadBalancer", "http"})
		}
	}
	return true, single
}

// loadBalancer checks a TrafficRoute's loadBalancer: one of Kuma's types, given as a
// mapping (its settings are Envoy's, kept as written).
func (v *validator) loadBalancer(raw json.RawMessage) {
	if len(raw) == 0 {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 1 {
		v.errorf("loadBalancer", string(raw), "give one of %s, e.g. {roundRobin: {}}", strings.Join(kumaLoadBalancers, ", "))
		return
	}
	for k, body := range m {
		if !slices.Contains(kumaLoadBalancers, k) {
			msg := "unknown load balancer (known: " + strings.Join(kumaLoadBalancers, ", ") + ")"
			if s := Suggest(k, kumaLoadBalancers); s != "" {
				msg = "unknown load balancer, did you mean " + s + "?"
			}
			v.errorf("loadBalancer."+k, "", "%s", msg)
		} else if len(body) == 0 || body[0] != '{' {
			v.errorf("loadBalancer."+k, string(body), "expected a mapping (e.g. %s: {})", k)
		}
	}
}

// kumaConfIndex finds the index of a destination in a path of the design's form.
var kumaConfIndex = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^((?:spec\.)?conf)\[(\d+)\]`) })

// kumaConfPath is the path of Kuma's form for a path p of the design's form, when conf was
// written as Kuma's split (single: as Kuma's destination).
func kumaConfPath(p string, single bool) string {
	for _, top := range []string{"loadBalancer", "spec.loadBalancer"} {
		if within(p, top) {
			return strings.TrimSuffix(top, "loadBalancer") + "conf." + strings.TrimPrefix(p, strings.TrimSuffix(top, "loadBalancer"))
		}
	}
	m := kumaConfIndex().FindStringSubmatchIndex(p)
	if m == nil {
		return p
	}
	conf, rest := p[m[2]:m[3]], p[m[1]:]
	if single {
		return conf + rest // conf[0].destination -> conf.destination
	}
	return conf + ".split[" + p[m[4]:m[5]] + "]" + rest
}
