package routing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kumadp/kuma-dp/mesh"
)

// Strategy picks the router a route is scheduled onto. It is the design's
// RouteSchedulerStrategy: a user-written strategy implements it (or is a StrategyFunc) and
// reads the routers and their loads from the Scheduler it is given by NewStrategy.
type Strategy interface {
	Schedule(r *mesh.Route) (*mesh.Router, error)
}

// StrategyFunc is a Strategy written as a function.
type StrategyFunc func(r *mesh.Route) (*mesh.Router, error)

// Schedule implements Strategy.
func (f StrategyFunc) Schedule(r *mesh.Route) (*mesh.Router, error) { return f(r) }

// Scheduler keeps the routers and which route is bound where, and schedules new routes:
// affinity first (a route whose host, or wildcard domain, is already served by a router
// goes there), else its Strategy among the candidates. Safe for concurrent use.
type Scheduler struct {
	mu       sync.Mutex
	routers  map[string]*mesh.Router
	bound    map[string]string         // route key -> router
	keys     map[string][3]string      // route key -> its affinity keys (host, domain, wildcard domain)
	load     map[string]int            // router -> routes bound
	hosts    map[string]map[string]int // host key -> router -> routes
	domains  map[string]map[string]int // domain holding specific hosts -> router -> routes
	wilds    map[string]map[string]int // wildcard domain -> router -> routes
	sets     map[string]map[string]int // candidate set (names joined) -> router -> routes
	setOf    map[string]string         // route key -> its candidate set when bound
	strategy Strategy
}

// NewScheduler is a scheduler using the strategy newStrategy builds for it (nil:
// round-robin).
func NewScheduler(newStrategy func(*Scheduler) Strategy) *Scheduler {
	s := &Scheduler{routers: map[string]*mesh.Router{}, bound: map[string]string{}, keys: map[string][3]string{},
		load: map[string]int{}, hosts: map[string]map[string]int{}, domains: map[string]map[string]int{}, wilds: map[string]map[string]int{},
		sets: map[string]map[string]int{}, setOf: map[string]string{}}
	if newStrategy == nil {
		newStrategy = RoundRobin
	}
	s.strategy = newStrategy(s)
	return s
}

// Reset forgets every router and binding (to rebuild them from the store); the strategy
// and its state (round-robin cursors) stay.
func (s *Scheduler) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.routers)
	clear(s.bound)
	clear(s.keys)
	clear(s.load)
	clear(s.hosts)
	clear(s.domains)
	clear(s.wilds)
	clear(s.sets)
	clear(s.setOf)
}

// SetRouter adds or replaces a router.
func (s *Scheduler) SetRouter(rt *mesh.Router) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routers[rt.Name] = rt
}

// DeleteRouter removes a router; the routes bound to it are returned (to re-schedule) and
// unbound.
func (s *Scheduler) DeleteRouter(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.routers, name)
	var out []string
	for k, r := range s.bound {
		if r == name {
			out = append(out, k)
			s.unbind(k)
		}
	}
	slices.Sort(out)
	return out
}

// Router returns a router by name.
func (s *Scheduler) Router(name string) *mesh.Router {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routers[name]
}

// Routers returns the routers sorted by name.
func (s *Scheduler) Routers() []*mesh.Router {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedRouters()
}

func (s *Scheduler) sortedRouters() []*mesh.Router {
	out := make([]*mesh.Router, 0, len(s.routers))
	for _, r := range s.routers {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *mesh.Router) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Candidates are the routers that take r: those whose selectors take it, narrowed to the
// router whose zone holds a user route's name (ZoneOwner), when there is one.
func (s *Scheduler) Candidates(r *mesh.Route) []*mesh.Router {
	s.mu.Lock()
	defer s.mu.Unlock()
	cands, _ := s.candidates(r)
	return cands
}

func (s *Scheduler) candidates(r *mesh.Route) ([]*mesh.Router, error) {
	routers := s.sortedRouters()
	return zoneCandidates(routers, Candidates(routers, r), r)
}

// Load is how many routes are bound to router.
func (s *Scheduler) Load(router string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load[router]
}

// BoundTo is the router a route (namespace/name) is bound to, "" when none.
func (s *Scheduler) BoundTo(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound[key]
}

// Bind records that r is bound to router (a binding read from the store, or one made).
func (s *Scheduler) Bind(r *mesh.Route, router string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bind(r, router)
}

func (s *Scheduler) bind(r *mesh.Route, router string) {
	k := RouteKey(r)
	if s.bound[k] != "" {
		s.unbind(k)
	}
	host, domain, wild := affinityKeys(r)
	var keys [3]string
	if wild {
		keys[2] = domain
		inc(s.wilds, domain, router)
	} else {
		keys[0] = host
		inc(s.hosts, host, router)
		if domain != "" {
			keys[1] = domain
			inc(s.domains, domain, router)
		}
	}
	s.keys[k] = keys
	s.bound[k] = router
	s.load[router]++
	cands, _ := s.candidates(r)
	set := setKey(cands)
	s.setOf[k] = set
	inc(s.sets, set, router)
}

func setKey(cands []*mesh.Router) string {
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	return strings.Join(names, ",")
}

// SetLoad is how many routes with the same candidates as r are bound to router.
func (s *Scheduler) SetLoad(r *mesh.Route, router string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cands, _ := s.candidates(r)
	return s.sets[setKey(cands)][router]
}

// Unbind forgets a route's binding (deleted, or put back to new).
func (s *Scheduler) Unbind(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unbind(key)
}

func (s *Scheduler) unbind(k string) {
	router, ok := s.bound[k]
	if !ok {
		return
	}
	keys := s.keys[k]
	dec(s.hosts, keys[0], router)
	dec(s.domains, keys[1], router)
	dec(s.wilds, keys[2], router)
	dec(s.sets, s.setOf[k], router)
	delete(s.setOf, k)
	delete(s.keys, k)
	delete(s.bound, k)
	if s.load[router]--; s.load[router] <= 0 {
		delete(s.load, router)
	}
}

func inc(m map[string]map[string]int, key, router string) {
	if m[key] == nil {
		m[key] = map[string]int{}
	}
	m[key][router]++
}

func dec(m map[string]map[string]int, key, router string) {
	if key == "" || m[key] == nil {
		return
	}
	if m[key][router]--; m[key][router] <= 0 {
		delete(m[key], router)
	}
	if len(m[key]) == 0 {
		delete(m, key)
	}
}

// affinity is the router already serving r's name or domain ("" when none): the same host
// (or system name), a wildcard over the host's domain, or, for a wildcard, a host inside its
// domain or the same wildcard. Ties (several routers, from routers added later) go to the
// lowest name.
func (s *Scheduler) affinity(r *mesh.Route) (string, string) {
	host, domain, wild := affinityKeys(r)
	pick := func(m map[string]int) string {
		best := ""
		for rt := range m {
			if best == "" || rt < best {
				best = rt
			}
		}
		return best
	}
	if wild {
		if rt := pick(s.wilds[domain]); rt != "" {
			return rt, "the wildcard *." + domain
		}
		if rt := pick(s.domains[domain]); rt != "" {
			return rt, "hosts under " + domain
		}
		return "", ""
	}
	if rt := pick(s.hosts[host]); rt != "" {
		return rt, "the host " + strings.TrimPrefix(host, "system:")
	}
	if domain != "" {
		if rt := pick(s.wilds[domain]); rt != "" {
			return rt, "the wildcard *." + domain
		}
	}
	return "", ""
}

// Schedule picks r's router and records the binding: the router already serving its name
// (affinity), else the strategy's pick among the candidates. No candidate gives an Error
// with reason NoRouterMatches; a name served by a router r's labels do not select, too.
// Call Bind instead when the binding could not be stored, after Unbind.
func (s *Scheduler) Schedule(r *mesh.Route) (*mesh.Router, error) {
	s.mu.Lock()
	cands, err := s.candidates(r)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if len(cands) == 0 {
		s.mu.Unlock()
		return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: fmt.Sprintf("no router takes route %s (labels %s)", RouteKey(r), cmp.Or(mesh.LabelsText(r.Labels()), "<none>"))}
	}
	if rt, why := s.affinity(r); rt != "" {
		defer s.mu.Unlock()
		i := slices.IndexFunc(cands, func(c *mesh.Router) bool { return c.Name == rt })
		if i < 0 {
			return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: fmt.Sprintf("%s is served by router %s, which does not take route %s: one name is never served by two routers", why, rt, RouteKey(r))}
		}
		s.bind(r, rt)
		return cands[i], nil
	}
	s.mu.Unlock()
	rt, err := s.strategy.Schedule(r)
	if err != nil {
		return nil, err
	}
	if rt == nil || !slices.ContainsFunc(cands, func(c *mesh.Router) bool { return c.Name == rt.Name }) {
		name := "<none>"
		if rt != nil {
			name = rt.Name
		}
		return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: fmt.Sprintf("the strategy picked router %s, which does not take route %s", name, RouteKey(r))}
	}
	s.Bind(r, rt.Name)
	return rt, nil
}

// RoundRobin is the default strategy: each route goes to the candidate that has the fewest
// routes with the same candidates (ties: lowest name), which deals the routes of one set of
// candidates out in turn, a, b, c, a, b, c... Its state is the bindings themselves, so a new
// leader continues the same rotation: the spread stays within one route per router.
func RoundRobin(s *Scheduler) Strategy {
	return StrategyFunc(func(r *mesh.Route) (*mesh.Router, error) {
		cands := s.Candidates(r)
		if len(cands) == 0 {
			return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: "no router takes route " + RouteKey(r)}
		}
		best, bestLoad := cands[0], s.SetLoad(r, cands[0].Name)
		for _, c := range cands[1:] {
			if l := s.SetLoad(r, c.Name); l < bestLoad {
				best, bestLoad = c, l
			}
		}
		return best, nil
	})
}

// LeastRoutes sends each route to the candidate with the fewest routes bound (ties: lowest
// name).
func LeastRoutes(s *Scheduler) Strategy {
	return StrategyFunc(func(r *mesh.Route) (*mesh.Router, error) {
		cands := s.Candidates(r)
		if len(cands) == 0 {
			return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: "no router takes route " + RouteKey(r)}
		}
		best := cands[0]
		for _, c := range cands[1:] {
			if s.Load(c.Name) < s.Load(best.Name) {
				best = c
			}
		}
		return best, nil
	})
}

// Strategies are the built-in strategies by name.
var Strategies = map[string]func(*Scheduler) Strategy{"round-robin": RoundRobin, "least-routes": LeastRoutes}
