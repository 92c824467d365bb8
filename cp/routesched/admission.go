package routesched

import (
	"context"
	"errors"
	"strings"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// admit computes the admission of the routes kept and about to be bound, on each router:
// every route's again when the pass checked every binding; otherwise the routes that
// moved (kept, unbound, bound, changed) go in or out of their routers' admitters, which
// compute again only what that can affect (routing.Admitter). p.changed is the routes whose
// admission changed.
func (p *meshPass) admit() {
	p.changed = map[string][]string{}
	touched := map[string]bool{}
	for _, ri := range p.routes {
		name := ri.it.Name
		rt := p.routerOf(ri)
		m, had := p.member[name]
		if had && m.router == rt {
			if m.r != ri.r { // a new version: a change only when it claims otherwise
				p.adm[rt].Set(ri.r)
				touched[rt] = true
				p.member[name] = member{rt, ri.r}
			}
			continue
		}
		if had {
			p.adm[m.router].Delete(routing.RouteKey(m.r))
			touched[m.router] = true
			delete(p.member, name)
		}
		if rt != "" {
			p.admitter(rt).Set(ri.r)
			touched[rt] = true
			p.member[name] = member{rt, ri.r}
		}
	}
	for _, name := range p.gone {
		if m, had := p.member[name]; had {
			p.adm[m.router].Delete(routing.RouteKey(m.r))
			touched[m.router] = true
			delete(p.member, name)
		}
	}
	for rt := range p.recompute {
		if p.adm[rt] != nil {
			touched[rt] = true
		}
	}
	for rt := range touched {
		a := p.adm[rt]
		var changed map[string]routing.Admission
		if p.all || p.recompute[rt] {
			changed = a.Recompute()
		} else {
			changed = a.Changes()
		}
		for k := range changed {
			p.changed[rt] = append(p.changed[rt], k)
		}
		if a.Len() == 0 {
			delete(p.adm, rt)
		}
	}
}

// admitter is router rt's admitter, made when it has none.
func (p *meshPass) admitter(rt string) *routing.Admitter {
	a := p.adm[rt]
	if a == nil {
		a = routing.NewAdmitter(p.s.Router(rt))
		p.adm[rt] = a
	}
	return a
}

// admission is route key's admission on router rt, as last computed.
func (p *meshPass) admission(rt, key string) routing.Admission {
	if a := p.adm[rt]; a != nil {
		ad, _ := a.Admission(key)
		return ad
	}
	return routing.Admission{}
}

// writeAdmission writes the admission changes of routes already bound (displaced holders,
// freed hosts): of the routes visited and of those whose admission changed. A route kept
// unchanged whose admission is the one its status was found to show is passed over. It
// returns the routes it looked at.
func (rc *Reconciler) writeAdmission(ctx context.Context, p *meshPass) []routeItem {
	routes := p.routes
	if !p.all {
		routes = rc.withChanged(p)
	}
	for _, ri := range routes {
		kp, isKept := p.kept[ri.it.Name]
		if !isKept || ri.r.PhaseOf() != mesh.PhaseScheduled {
			continue // (a route bound by this pass is written with its admission)
		}
		if rc.mirror.pending(ri.it.Key) {
			continue // its status as this reconciler wrote it is not read back yet: then
		}
		ad := p.admission(kp.router, kp.key)
		if kp.admitted && kp.admission == ad {
			continue
		}
		var old []mesh.RouteIngress
		if ri.r.Status != nil {
			old = ri.r.Status.Ingress
		}
		ing := ingressFor(p.s.Router(kp.router), ri.r, ad, old, p.now)
		if !sameIngress(old, ing) || ri.r.Status.Reason != "" {
			doc, err := setStatus(ctx, rc.Store, ri.it, ri.r, "", "", ing)
			if err == nil {
				rc.mirror.wrote(ri.it.Key, doc)
				// its status shows ad now (kept through the watch's echo of the write)
				kp.admission, kp.admitted = ad, true
				p.kept[ri.it.Name] = kp
			} else if !errors.Is(err, store.ErrConflict) {
				rc.Log.Warn("cannot write route admission", "route", kp.key, "error", err)
			}
			continue
		}
		kp.admission, kp.admitted = ad, true
		p.kept[ri.it.Name] = kp
	}
	return routes
}

// withChanged is the routes visited and those whose admission changed.
func (rc *Reconciler) withChanged(p *meshPass) []routeItem {
	routes := p.routes
	seen := map[string]bool{}
	for _, ri := range p.routes {
		seen[ri.it.Name] = true
	}
	for _, keys := range p.changed {
		for _, k := range keys {
			ns, n, _ := strings.Cut(k, "/")
			name := mesh.RouteKeyName(ns, n)
			if seen[name] {
				continue
			}
			it, ok := rc.mirror.items[store.Key{Mesh: p.mesh, Type: mesh.KindRoute, Name: name}]
			if !ok {
				continue
			}
			if res, err := rc.decode(it); err == nil {
				if r, ok := res.(*mesh.Route); ok && storedAs(name, r) {
					seen[name] = true
					routes = append(routes, routeItem{it, r})
				}
			}
		}
	}
	return routes
}
