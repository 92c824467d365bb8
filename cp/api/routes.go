package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kumadp/kuma-dp/cp/routesched"
	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// InNamespace is the routes (or route bindings) of rs in namespace ns, as `get routes -n
// NS` lists them: each is stored as name.namespace (a namespace has no dot, a name may).
// Filtered here: keys are ordered by name, so a namespace is no range of the store.
func InNamespace(rs []Resource, ns string) []Resource {
	var out []Resource
	for _, r := range rs {
		if i := strings.LastIndexByte(r.Name, '.'); i >= 0 && r.Name[i+1:] == ns {
			out = append(out, r)
		}
	}
	return out
}

// statusWrite applies the rules of the kinds whose status is the control plane's: Route
// (routeWrite) and Router (routerWrite).
func (s *Server) statusWrite(ctx context.Context, k store.Key, body []byte, expect int64) ([]byte, int, string) {
	if k.Type == mesh.KindRouter {
		return s.routerWrite(ctx, k, body)
	}
	return s.routeWrite(ctx, k, body, expect)
}

// routerWrite applies the router API's rule to a Router write: its status is the control
// plane's (the leader writes its replicas' readiness there, which its DNS serves): refused on
// create, and on update the stored one is kept, whatever the document's says. It returns the
// document to store, or the problem.
func (s *Server) routerWrite(ctx context.Context, k store.Key, body []byte) ([]byte, int, string) {
	rs, _ := mesh.Decode(k.String(), body) // checked already
	r := rs[0].(*mesh.Router)
	cur, err := s.Store.Get(ctx, k)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if r.Status != nil {
			return nil, http.StatusBadRequest, fmt.Sprintf("router %s: status: set by the control plane (its replicas' readiness); leave it out when creating a router", r.Name)
		}
		return body, 0, ""
	case err != nil:
		return nil, -1, err.Error()
	}
	var old *mesh.RouterStatus
	if prev, err := mesh.Decode(cur.Key.String(), cur.Doc); err == nil && len(prev) == 1 {
		if rt, ok := prev[0].(*mesh.Router); ok {
			old = rt.Status
		}
	}
	if r.Status == nil && old == nil {
		return body, 0, ""
	}
	r.Status = old
	return mesh.EncodeJSON(r), 0, ""
}

// routeWrite applies the route API's rules to a Route write: no status on create; on update
// phase or dns may not change (only a RouteBinding sets them) and the stored status is kept,
// whatever else the document's says. It returns the document to store, or the problem.
func (s *Server) routeWrite(ctx context.Context, k store.Key, body []byte, expect int64) ([]byte, int, string) {
	rs, _ := mesh.Decode(k.String(), body) // checked already
	r := rs[0].(*mesh.Route)
	cur, err := s.Store.Get(ctx, k)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if r.Status != nil {
			return nil, http.StatusBadRequest, fmt.Sprintf("route %s/%s: status: set by the control plane (a RouteBinding sets phase and dns); leave it out when creating a route", r.Namespace, r.Name)
		}
		return body, 0, ""
	case err != nil:
		return nil, -1, err.Error()
	}
	old, err := routesched.DecodeRoute(cur)
	if err != nil {
		return body, 0, "" // a stored document that no longer decodes is replaced
	}
	if r.Status == nil {
		r.Status = old.Status
		return routesched.Encode(r), 0, ""
	}
	var oldPhase, oldDNS string
	if old.Status != nil {
		oldPhase, oldDNS = old.Status.Phase, old.Status.DNS
	}
	if r.Status.Phase != oldPhase && !(r.Status.Phase == mesh.PhaseNew && oldPhase == "") {
		return nil, http.StatusBadRequest, fmt.Sprintf("route %s/%s: status.phase: only a RouteBinding changes it (value %q, stored %q)", r.Namespace, r.Name, r.Status.Phase, oldPhase)
	}
	if r.Status.DNS != oldDNS {
		return nil, http.StatusBadRequest, fmt.Sprintf("route %s/%s: status.dns: only a RouteBinding changes it (value %q, stored %q)", r.Namespace, r.Name, r.Status.DNS, oldDNS)
	}
	// The rest of the status (router, admission, reason) is the control plane's too: the
	// stored one stays, as when none is given (the DNS and the routers' Envoys read it).
	r.Status = old.Status
	return routesched.Encode(r), 0, ""
}

// fits says what is wrong with binding b (key k) to router rt: the router must take the
// route and the binding's dns be the route's name on it ("" when it fits; a route that
// cannot be read is left to Bind, which names it).
func fits(ctx context.Context, st store.Store, k store.Key, b *mesh.RouteBinding, rt *mesh.Router) string {
	it, err := st.Get(ctx, store.Key{Mesh: k.Mesh, Type: mesh.KindRoute, Name: k.Name})
	if err != nil {
		return ""
	}
	route, err := routesched.DecodeRoute(it)
	if err != nil {
		return ""
	}
	if !routing.Matches(rt, route) {
		return fmt.Sprintf("routebinding %s: router: %s does not take route %s (its routeSelector or namespaceSelector) (value %q)", k.Name, rt.Name, routing.RouteKey(route), b.Router)
	}
	name, err := routing.FinalDNS(route, rt)
	if err != nil {
		return fmt.Sprintf("routebinding %s: dns: %v", k.Name, err)
	}
	if name != b.DNS {
		return fmt.Sprintf("routebinding %s: dns: the route's name on router %s is %q (value %q)", k.Name, rt.Name, name, b.DNS)
	}
	return ""
}

// bind creates a RouteBinding: it is applied to its route's status in the same transaction.
func (s *Server) bind(w http.ResponseWriter, r *http.Request, k store.Key, body []byte) int {
	st, ok := s.Store.(store.Transactional)
	if !ok {
		fail(w, http.StatusNotImplemented, "no transactions", "this store cannot apply a binding to its route atomically")
		return http.StatusNotImplemented
	}
	rs, _ := mesh.Decode(k.String(), body)
	b := rs[0].(*mesh.RouteBinding)
	router, err := s.Store.Get(r.Context(), store.Key{Mesh: k.Mesh, Type: mesh.KindRouter, Name: b.Router})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			fail(w, http.StatusBadRequest, "invalid resource", fmt.Sprintf("routebinding %s: router: no router %q in mesh %s", k.Name, b.Router, k.Mesh))
			return http.StatusBadRequest
		}
		return storeError(w, err)
	}
	canonical := ""
	if rrs, err := mesh.Decode(router.Key.String(), router.Doc); err == nil && len(rrs) == 1 {
		if rt, ok := rrs[0].(*mesh.Router); ok {
			canonical = routesched.Canonical(rt)
			if msg := fits(r.Context(), s.Store, k, b, rt); msg != "" {
				fail(w, http.StatusBadRequest, "invalid resource", msg)
				return http.StatusBadRequest
			}
		}
	}
	if err := routesched.Bind(r.Context(), st, k.Mesh, b, canonical, nil); err != nil {
		if errors.Is(err, routesched.ErrBound) {
			fail(w, http.StatusConflict, "already bound", err.Error())
			return http.StatusConflict
		}
		return storeError(w, err)
	}
	writeJSON(w, http.StatusCreated, map[string]string{"bound": k.Name, "router": b.Router, "dns": b.DNS})
	return http.StatusCreated
}
