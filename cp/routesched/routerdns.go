package routesched

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// shadowedRouters are the routers (mesh/name) whose dns another router already has, with
// that router: the oldest router with a dns holds it (the store's creation time, then mesh
// and name, as the control plane's DNS serves its zone: shardzones' order), so a router
// created later with the same dns - a shard copied and its dns left as it was - takes no
// routes and never takes the zone from the router serving it. Each newly shadowed router is
// logged once.
func (rc *Reconciler) shadowedRouters(items []store.Item) map[string]string {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b store.Item) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Mesh+"/"+a.Name, b.Mesh+"/"+b.Name))
	})
	first := map[string]string{} // dns -> mesh/name
	out := map[string]string{}
	for _, it := range items {
		res, err := rc.decode(it)
		rt, ok := res.(*mesh.Router)
		if err != nil || !ok {
			continue
		}
		key := it.Mesh + "/" + rt.Name
		zone := strings.ToLower(strings.TrimSuffix(rt.DNS, "."))
		if holder, taken := first[zone]; taken {
			out[key] = holder
			if rc.shadowed[key] != holder {
				rc.Log.Warn("router has the dns of an older router: it takes no routes until its dns is its own", "router", key, "dns", rt.DNS, "held by", holder)
			}
			continue
		}
		first[zone] = key
	}
	return out
}

// dnsCondition is the condition a router's status carries while an older router holds its
// dns (nil when it holds its own).
func dnsCondition(rt *mesh.Router, holder string, now time.Time) *mesh.RouteCondition {
	if holder == "" {
		return nil
	}
	return &mesh.RouteCondition{Type: ConditionDNS, Status: "False", Reason: ReasonDNSInUse, LastTransitionTime: now,
		Message: fmt.Sprintf("dns %s is held by router %s, which is older: this router takes no routes until its dns is its own", rt.DNS, holder)}
}

// writeRouterStatus writes each router's DNS condition where it changed: set on a router
// whose dns an older one holds, cleared once its dns is its own. The rest of the status (the
// replicas and their conditions, package routerstatus's) is kept as read, and that writer
// keeps this condition. Compared on the version read: a router changed meanwhile is written
// by the next pass.
func (rc *Reconciler) writeRouterStatus(ctx context.Context, items []store.Item, now time.Time) {
	for _, it := range items {
		res, err := rc.decode(it)
		rt, ok := res.(*mesh.Router)
		if err != nil || !ok {
			continue
		}
		want := dnsCondition(rt, rc.shadowed[it.Mesh+"/"+rt.Name], now)
		have := rt.Status.Condition(ConditionDNS)
		if want == nil && have == nil || want != nil && have != nil && sameCondition(*have, *want) {
			continue
		}
		c := *rt
		c.SetCreationTime(time.Time{})
		st := mesh.RouterStatus{}
		if rt.Status != nil {
			st = *rt.Status
		}
		st.Conditions = slices.DeleteFunc(slices.Clone(st.Conditions), func(c mesh.RouteCondition) bool { return c.Type == ConditionDNS })
		if want != nil {
			st.Conditions = append(st.Conditions, *want)
		}
		c.Status = &st
		if len(st.Conditions) == 0 && len(st.Replicas) == 0 && st.DesiredReplicas == 0 && st.ReadyReplicas == 0 {
			c.Status = nil
		}
		if _, err := rc.Store.Put(ctx, it.Key, Encode(&c), it.Version); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			rc.Log.Warn("cannot write router status", "router", it.Key.String(), "error", err)
		}
	}
}

func sameCondition(c, d mesh.RouteCondition) bool {
	return c.Type == d.Type && c.Status == d.Status && c.Reason == d.Reason && c.Message == d.Message
}
