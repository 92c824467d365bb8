package mesh

import (
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
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
// design's: split is the list, destination one entry of weight 1, and loadBalancer is kept as
// written (TrafficRoute.LoadBalancer; ParseLoadBalancer reads it for the route's clusters), and
// conf.http (Kuma's HTTP matching and rewriting) is read into TrafficRoute.HTTP
// (trafficroute_http.go).
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
			if _, both := m["http"]; both {
				d.errorf(prefix+"http", "", "give the HTTP rules in conf only")
			}
			m["http"] = c[k]
		default:
			d.unknown(prefix+"conf."+k, k, []string{"split", "destination", "loadBalancer", "http"})
		}
	}
	return true, single
}

// LoadBalancer is a TrafficRoute's conf.loadBalancer, read: Type is one of Kuma's
// (kumaLoadBalancers; "" when not given, Envoy's round robin), with its settings - 0 or ""
// where not given, Envoy's default.
type LoadBalancer struct {
	Type         string
	ChoiceCount  uint32 // leastRequest: hosts compared per pick (Envoy's default 2)
	HashFunction string // ringHash: XX_HASH (default) or MURMUR_HASH_2
	MinRingSize  uint64 // ringHash: Envoy's default 1,024
	MaxRingSize  uint64 // ringHash: Envoy's default 8,388,608, also its limit
}

// The ring sizes Envoy defaults to and accepts.
const (
	DefaultMinRingSize = 1024
	MaxRingSize        = 8 * 1024 * 1024
)

// ringHashFunctions are the hash functions of Kuma's ringHash (Envoy's names).
var ringHashFunctions = []string{"XX_HASH", "MURMUR_HASH_2"}

// ParseLoadBalancer reads a TrafficRoute's loadBalancer; a validated one reads without
// error.
func ParseLoadBalancer(raw json.RawMessage) LoadBalancer {
	lb, _ := parseLoadBalancer(raw, nil)
	return lb
}

// loadBalancer checks a TrafficRoute's loadBalancer: one of Kuma's types, given as a
// mapping of that type's settings (Kuma's names, checked against Envoy's limits).
func (v *validator) loadBalancer(raw json.RawMessage) {
	parseLoadBalancer(raw, v.errorf)
}

// parseLoadBalancer reads a loadBalancer, its errors reported to errorf (when not nil); false
// when there was one.
func parseLoadBalancer(raw json.RawMessage, errorf func(path, value, format string, args ...any)) (LoadBalancer, bool) {
	var lb LoadBalancer
	if len(raw) == 0 || string(raw) == "null" {
		return lb, true
	}
	c := &lbCheck{errorf: errorf, ok: true}
	k, settings, ok := c.typeAndSettings(raw)
	if !ok {
		return lb, false
	}
	lb.Type = k
	path := "loadBalancer." + k
	known := lbSettings[k]
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		field := path + "." + name
		if !slices.Contains(known, name) {
			msg := "unknown setting of " + k
			if len(known) == 0 {
				msg += " (it has none: " + k + ": {})"
			} else {
				msg += " (known: " + strings.Join(known, ", ") + ")"
			}
			c.bad(field, "", "%s", msg)
			continue
		}
		lb.set(c, name, field, settings[name])
	}
	lb.checkRing(c, path)
	return lb, c.ok
}

// lbSettings are the settings of each of Kuma's load balancers that have any.
var lbSettings = map[string][]string{"leastRequest": {"choiceCount"}, "ringHash": {"hashFunction", "minRingSize", "maxRingSize"}}

// lbCheck reports a loadBalancer's errors to errorf (nil: to none) and notes that there was
// one.
type lbCheck struct {
	errorf func(path, value, format string, args ...any)
	ok     bool
}

func (c *lbCheck) bad(path, value, format string, args ...any) {
	c.ok = false
	if c.errorf != nil {
		c.errorf(path, value, format, args...)
	}
}

// typeAndSettings reads raw as one of Kuma's load balancers, {TYPE: {SETTINGS}} (a null
// body is no settings).
func (c *lbCheck) typeAndSettings(raw json.RawMessage) (string, map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 1 {
		c.bad("loadBalancer", string(raw), "give one of %s, e.g. {roundRobin: {}}", strings.Join(kumaLoadBalancers, ", "))
		return "", nil, false
	}
	for k, body := range m {
		if !slices.Contains(kumaLoadBalancers, k) {
			msg := "unknown load balancer (known: " + strings.Join(kumaLoadBalancers, ", ") + ")"
			if s := Suggest(k, kumaLoadBalancers); s != "" {
				msg = "unknown load balancer, did you mean " + s + "?"
			}
			c.bad("loadBalancer."+k, "", "%s", msg)
			return "", nil, false
		}
		if string(body) == "null" {
			body = json.RawMessage("{}")
		}
		var settings map[string]json.RawMessage
		if err := json.Unmarshal(body, &settings); err != nil {
			c.bad("loadBalancer."+k, string(body), "expected a mapping (e.g. %s: {})", k)
			return "", nil, false
		}
		return k, settings, true
	}
	return "", nil, false // not reached: m has one key
}

// set reads one known setting (at field) into lb, within Envoy's limits.
func (lb *LoadBalancer) set(c *lbCheck, name, field string, val json.RawMessage) {
	switch name {
	case "choiceCount":
		n, err := strconv.ParseUint(string(val), 10, 32)
		switch {
		case err != nil:
			c.bad(field, string(val), "expected a whole number of hosts, 2 to %d", uint32(math.MaxUint32))
		case n == 1:
			c.bad(field, string(val), "must be 2 or more (Envoy compares at least two hosts; 0 or left out is 2)")
		default:
			lb.ChoiceCount = uint32(n)
		}
	case "hashFunction":
		var f string
		if err := json.Unmarshal(val, &f); err != nil || (f != "" && !slices.Contains(ringHashFunctions, f)) {
			c.bad(field, strings.Trim(string(val), `"`), "must be one of %s", strings.Join(ringHashFunctions, ", "))
			return
		}
		lb.HashFunction = f
	case "minRingSize", "maxRingSize":
		n, err := strconv.ParseUint(string(val), 10, 64)
		if err != nil || n > MaxRingSize {
			c.bad(field, string(val), "expected a ring size, 1 to %d (Envoy's limit; 0 or left out is Envoy's default)", MaxRingSize)
			return
		}
		if name == "minRingSize" {
			lb.MinRingSize = n
		} else {
			lb.MaxRingSize = n
		}
	}
}

// checkRing refuses ring sizes that Envoy would: the minimum above the maximum, or a maximum
// below the minimum's default when the minimum is left out.
func (lb LoadBalancer) checkRing(c *lbCheck, path string) {
	if lb.MinRingSize > lb.maxRing() {
		c.bad(path+".minRingSize", strconv.FormatUint(lb.MinRingSize, 10), "must not exceed maxRingSize (%d)", lb.maxRing())
	} else if lb.MinRingSize == 0 && lb.MaxRingSize != 0 && lb.MaxRingSize < DefaultMinRingSize {
		c.bad(path+".maxRingSize", strconv.FormatUint(lb.MaxRingSize, 10), "is below minRingSize's default %d: give minRingSize too", DefaultMinRingSize)
	}
}

func (lb LoadBalancer) maxRing() uint64 {
	if lb.MaxRingSize == 0 {
		return MaxRingSize
	}
	return lb.MaxRingSize
}

// kumaConfIndex finds the index of a destination in a path of the design's form.
var kumaConfIndex = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^((?:spec\.)?conf)\[(\d+)\]`) })

// kumaConfPath is the path of Kuma's form for a path p of the design's form, when conf was
// written as Kuma's split (single: as Kuma's destination).
func kumaConfPath(p string, single bool) string {
	for _, top := range []string{"loadBalancer", "spec.loadBalancer", "http", "spec.http"} {
		if within(p, top) {
			spec := strings.TrimSuffix(strings.TrimSuffix(top, "loadBalancer"), "http")
			return spec + "conf." + strings.TrimPrefix(p, spec)
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
