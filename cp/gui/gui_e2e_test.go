package gui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The GUI against a real control plane (kuma-cp on a three-member etcd, real agents) in a
// real browser: every page loads with no console error and no failed request and passes
// the accessibility checks at 1280x800 and a phone's width; the overview's counts are the
// API's; a dataplane's VIP table is `kuma-dp vips`'s for it; the routes' status and the
// shards' picture are the API's; a change applied shows on an open page within 2 s without
// a reload; an agent killed turns Offline on the open list.
func TestGUIInABrowser(t *testing.T) {
	b := newBrowser(t)
	e := newCPEnv(t)
	e.apply(append(files(t, "testdata/mesh/policies", "testdata/mesh/dataplane.yaml", "testdata/routes/shard-a.yaml"),
		api.Source{Name: "shards.yaml", Data: []byte(shards)})...)
	e.startAgent("web-1", e.address)
	e.startAgent("httpbin-1", e.address)
	e.startAgent("gateway-a-1", e.address2) // on the other replica
	ctx := context.Background()
	testutil.WaitFor(t, "the routes scheduled, store.blog refused", 20*time.Second, func() bool {
		web, err1 := e.api.Get(ctx, "default", "routes", "web.shop")
		blog, err2 := e.api.Get(ctx, "default", "routes", "store.blog")
		return err1 == nil && err2 == nil && strings.Contains(string(web.Spec), `"status":"True"`) && strings.Contains(string(blog.Spec), `"status":"False"`)
	})
	testutil.WaitFor(t, "the three agents online", 10*time.Second, func() bool {
		as, err := e.api.Agents(ctx)
		return err == nil && len(as) == 3
	})
	gui := e.apiURL + "/gui"

	t.Run("overview", func(t *testing.T) {
		b.t = t
		b.open(gui + "/")
		insights, err := e.api.MeshInsights(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(insights) != 2 {
			t.Fatalf("the API has %d meshes, want default and staging", len(insights))
		}
		for _, mi := range insights {
			got := eval[map[string]string](b, fmt.Sprintf(`Object.fromEntries(Array.from(document.querySelectorAll('tr[data-mesh=%q] [data-count]')).map(td => [td.dataset.count, td.textContent.trim()]))`, mi.Name))
			want := map[string]string{"dataplanes": fmt.Sprint(mi.Dataplanes.Total), "online": fmt.Sprint(mi.Dataplanes.Online),
				"offline": fmt.Sprint(mi.Dataplanes.Offline), "services": fmt.Sprint(mi.Services.Total),
				"routers": fmt.Sprint(mi.Routers.Total), "routes": fmt.Sprint(mi.Routes.Total)}
			for kind, tot := range mi.Policies {
				want[kind] = fmt.Sprint(tot.Total)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("mesh %s: %s %q on the page, %q in the API", mi.Name, k, got[k], v)
				}
			}
		}
		if got := eval[string](b, `document.querySelector('[data-field=leader]').textContent`); got != "replica-1" {
			t.Errorf("leader %q on the page, want replica-1", got)
		}
		for field, want := range map[string]string{"etcdMembers": "3", "etcdMembersReachable": "3", "synced": "true", "replicas": "replica-1, replica-2"} {
			if got := eval[string](b, `document.querySelector('[data-field=`+field+`]').textContent`); got != want {
				t.Errorf("%s %q on the page, want %s", field, got, want)
			}
		}
		if got := eval[string](b, `document.getElementById('agents-total').textContent`); got != "3" {
			t.Errorf("agents %q on the page, want 3", got)
		}
		if got := eval[string](b, `Array.from(document.querySelectorAll('#replicas tbody tr')).map(tr => Array.from(tr.cells).map(c => c.textContent.replace(/\s+/g, ' ').trim()).join(' ')).join('; ')`); got != "replica-1 leader 2; replica-2 1" {
			t.Errorf("agents per replica on the page: %q", got)
		}
		b.accessible("overview")
		b.screenshot("overview")
		b.phone("overview")
		b.clean("overview")
		b.open(gui + "/meshes/default/dataplanes?replica=replica-2")
		if got := eval[[]string](b, `Array.from(document.querySelectorAll('#dataplanes tbody tr')).map(tr => tr.dataset.name)`); strings.Join(got, ",") != "gateway-a-1" {
			t.Errorf("the dataplanes connected to replica-2: %v, want gateway-a-1", got)
		}
		b.clean("dataplanes of replica-2")
	})

	t.Run("dataplane VIP table is kuma-dp vips", func(t *testing.T) {
		b.t = t
		b.open(gui + "/meshes/default/dataplanes/web-1")
		dpFile, dir := e.vipsFiles("web-1")
		want := kumaDPVips(t, e.dpBin, dpFile, dir)
		if len(want) == 0 || len(want) > 100 {
			t.Fatalf("kuma-dp vips gives %d names: the test wants one page of the table (1-100)", len(want))
		}
		rows := eval[[]string](b, `Array.from(document.querySelectorAll('#vip-table tbody tr')).map(tr => [tr.querySelector('summary').textContent.trim()].concat(Array.from(tr.querySelectorAll('td')).slice(0, 5).map(td => td.textContent.trim())).join(' | '))`)
		if len(rows) != len(want) {
			t.Errorf("the page has %d rows, kuma-dp vips %d", len(rows), len(want))
		}
		for i := range min(len(rows), len(want)) {
			if rows[i] != want[i].row() {
				t.Errorf("row %d:\n page      %s\n kuma-dp   %s", i, rows[i], want[i].row())
			}
		}
		story := eval[string](b, `document.querySelector('#vip-table details pre').textContent`)
		if !strings.Contains(story, "produced by") {
			t.Errorf("the first name's story: %q", story)
		}
		b.accessible("dataplane")
		// The Envoy resources' JSON on demand.
		if err := chromedpClick(b, `#envoy-json-box summary`); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the Envoy JSON read", 10*time.Second, func() bool {
			return strings.HasPrefix(eval[string](b, `document.getElementById('envoy-json').textContent`), "{")
		})
		var doc map[string][]json.RawMessage
		if err := json.Unmarshal([]byte(eval[string](b, `document.getElementById('envoy-json').textContent`)), &doc); err != nil {
			t.Fatalf("the Envoy JSON: %v", err)
		}
		if n := eval[string](b, `document.getElementById('listener-count').textContent`); n != fmt.Sprint(len(doc["listeners"])) || len(doc["listeners"]) == 0 {
			t.Errorf("%s listeners in the summary, %d in the JSON", n, len(doc["listeners"]))
		}
		b.screenshot("dataplane")
		b.phone("dataplane")
		b.clean("dataplane")
	})

	t.Run("live change within 2 s", func(t *testing.T) {
		b.t = t
		b.open(gui + "/meshes/default/dataplanes/web-1?host=live")
		eval[bool](b, `window.guiMarker = true`)
		if got := eval[string](b, `document.getElementById('vip-total').textContent`); got != "0" {
			t.Fatalf("%s names with 'live' before the change", got)
		}
		e.apply(api.Source{Name: "live.yaml", Data: []byte("type: VirtualOutbound\nmesh: default\nname: gui-live\nselectors:\n- match:\n    kuma.io/service: httpbin\nconf:\n  host: '{{.service}}.live.mesh'\n  port: '80'\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n")})
		took := testutil.WaitFor(t, "the new name on the open page", 2*time.Second, func() bool {
			return eval[string](b, `document.getElementById('vip-total').textContent`) == "1"
		})
		t.Logf("the applied change showed on the page %v after apply returned", took)
		if !eval[bool](b, `window.guiMarker === true`) {
			t.Error("the page was reloaded; it should have changed in place")
		}
		if got := eval[string](b, `document.querySelector('#vip-table summary').textContent`); got != "httpbin.live.mesh" {
			t.Errorf("the new row is %q", got)
		}
		b.clean("live change")
	})

	t.Run("agent killed turns offline", func(t *testing.T) {
		b.t = t
		b.open(gui + "/meshes/default/dataplanes?service=httpbin")
		eval[bool](b, `window.guiMarker = true`)
		status := `document.querySelector('tr[data-name="httpbin-1"] [data-status]').dataset.status`
		if got := eval[string](b, status); got != "Online" {
			t.Fatalf("httpbin-1 is %q before the kill", got)
		}
		b.screenshot("dataplanes")
		e.agents["httpbin-1"].Kill()
		took := testutil.WaitFor(t, "httpbin-1 Offline on the open page", 10*time.Second, func() bool { return eval[string](b, status) == "Offline" })
		t.Logf("the killed agent showed Offline %v after the kill", took)
		if !eval[bool](b, `window.guiMarker === true`) {
			t.Error("the page was reloaded; it should have changed in place")
		}
		b.open(gui + "/meshes/default/dataplanes")
		all, err := e.api.List(ctx, "default", "dataplanes")
		if err != nil {
			t.Fatal(err)
		}
		if got := eval[string](b, `document.getElementById('total').textContent`); got != fmt.Sprint(len(all)) {
			t.Errorf("%s dataplanes listed, %d in the API", got, len(all))
		}
		b.accessible("dataplanes")
		b.phone("dataplanes")
		b.clean("dataplanes")
	})

	t.Run("routers and their picture", func(t *testing.T) {
		b.t = t
		b.open(gui + "/meshes/default/routers")
		routes, err := e.api.List(ctx, "default", "routes")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			st, err := api.RouteStateOf(r)
			if err != nil {
				t.Fatal(err)
			}
			var spec struct{ Namespace, Name string }
			_ = json.Unmarshal(r.Spec, &spec)
			sel := fmt.Sprintf(`tr[data-route=%q]`, spec.Namespace+"/"+spec.Name)
			if got := eval[string](b, `document.querySelector('`+sel+` [data-field=dns]').textContent`); got != st.DNS {
				t.Errorf("route %s: DNS %q on the page, %q in the API", r.Name, got, st.DNS)
			}
			if got := eval[string](b, `document.querySelector('`+sel+` [data-field=admission]').textContent`); (st.Admitted == "True") != (got == "Admitted") {
				t.Errorf("route %s: admission %q on the page, %q in the API", r.Name, got, st.Admitted)
			}
		}
		routers, err := e.api.List(ctx, "default", "routers")
		if err != nil {
			t.Fatal(err)
		}
		if got := eval[int](b, `document.querySelectorAll('svg#shards g.router').length`); got != len(routers) {
			t.Errorf("%d routers in the picture, %d in the API", got, len(routers))
		}
		if got := eval[int](b, `document.querySelectorAll('svg#shards g[class^=route-]').length`); got != len(routes) {
			t.Errorf("%d routes in the picture, %d in the API", got, len(routes))
		}
		if got := eval[[]string](b, `Array.from(document.querySelectorAll('svg#shards g.replica-ready, svg#shards g.replica-down')).map(g => g.getAttribute('class') + ' ' + g.querySelector('text').textContent)`); strings.Join(got, ", ") != "replica-ready gateway-a-1, replica-down gateway-b-1" {
			t.Errorf("the picture's replicas: %v, want gateway-a-1 ready and gateway-b-1 not (no agent)", got)
		}
		if got := eval[string](b, `document.querySelector('tr[data-route="blog/store"] [data-field=admission]').textContent`); !strings.Contains(got, "held by shop/store") {
			t.Errorf("the refused route's admission %q does not name the route holding the host", got)
		}
		b.accessible("routers")
		b.screenshot("routers")
		b.phone("routers")
		b.clean("routers")
	})

	t.Run("zones and policies", func(t *testing.T) {
		b.t = t
		zones, err := e.api.Zones(ctx)
		if err != nil || len(zones) == 0 {
			t.Fatalf("the API's zones: %v, %v", zones, err)
		}
		b.open(gui + "/zones")
		for _, z := range zones {
			got := eval[string](b, fmt.Sprintf(`document.querySelector('[data-zone=%q] [data-field=serial]').textContent`, z.Origin))
			if got != fmt.Sprint(z.Serial) {
				t.Errorf("zone %s: serial %q on the page, %d in the API", z.Origin, got, z.Serial)
			}
		}
		if !strings.Contains(eval[string](b, `document.getElementById('content').textContent`), "gateway-a-1") {
			t.Error("the zones do not name the replica in their answers")
		}
		b.accessible("zones")
		b.screenshot("zones")
		b.phone("zones")
		b.open(gui + "/meshes/default/policies")
		for _, kind := range api.PolicyKinds {
			items, err := e.api.List(ctx, "default", api.TypeOf(kind))
			if err != nil {
				t.Fatal(err)
			}
			if got := eval[string](b, fmt.Sprintf(`document.querySelector('[data-count=%s]').textContent`, kind)); got != fmt.Sprint(len(items)) {
				t.Errorf("%s: %s on the page, %d in the API", kind, got, len(items))
			}
		}
		b.accessible("policies")
		b.screenshot("policies")
		b.phone("policies")
		b.clean("zones and policies")
	})

	t.Run("a missing dataplane is a 404 page", func(t *testing.T) {
		resp, err := http.Get(gui + "/meshes/default/dataplanes/nope")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	t.Run("an etcd member down", func(t *testing.T) {
		b.t = t
		e.etcd.Kill(2)
		testutil.WaitFor(t, "the overview naming the member down", 10*time.Second, func() bool {
			b.open(gui + "/")
			return eval[string](b, `document.querySelector('[data-field=etcdMembersReachable]').textContent`) == "2" &&
				strings.Contains(eval[string](b, `document.querySelector('[data-field=etcdMembersUnreachable]').textContent`), e.etcd.Endpoints()[2])
		})
		b.clean("an etcd member down")
	})
	t.Logf("screenshots in %s", b.shots)
}

// The GUI on the directory store (kuma-cp's default, with --admin-token-file): the overview
// and the lists load clean and match the API, an agent shows online, and a file edited by
// hand shows on an open page within 2 s.
func TestGUIOnTheDirectoryStore(t *testing.T) {
	b := newBrowser(t)
	e, resources := newDirEnv(t)
	e.startAgent("web-1", e.address)
	ctx := context.Background()
	testutil.WaitFor(t, "web-1 online", 10*time.Second, func() bool {
		as, err := e.api.Agents(ctx)
		return err == nil && len(as) == 1
	})
	gui := e.apiURL + "/gui"
	b.open(gui + "/")
	insights, err := e.api.MeshInsights(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mi := range insights {
		got := eval[string](b, fmt.Sprintf(`document.querySelector('tr[data-mesh=%q] [data-count=online]').textContent.trim() + '/' + document.querySelector('tr[data-mesh=%q] [data-count=dataplanes]').textContent`, mi.Name, mi.Name))
		if want := fmt.Sprintf("%d/%d", mi.Dataplanes.Online, mi.Dataplanes.Total); got != want {
			t.Errorf("mesh %s: online/dataplanes %s on the page, %s in the API", mi.Name, got, want)
		}
	}
	if got := eval[string](b, `document.querySelector('[data-field=store]').textContent`); got != "dir" {
		t.Errorf("store %q on the page", got)
	}
	b.accessible("overview (directory)")
	b.clean("overview (directory)")
	for _, page := range []string{"/meshes/default/dataplanes", "/meshes/default/policies", "/meshes/default/routers", "/zones"} {
		b.open(gui + page)
		b.clean(page + " (directory)")
	}
	b.open(gui + "/meshes/default/dataplanes/web-1?host=byhand")
	eval[bool](b, `window.guiMarker = true`)
	vo := "type: VirtualOutbound\nmesh: default\nname: by-hand\nselectors:\n- match:\n    kuma.io/service: httpbin\nconf:\n  host: '{{.service}}.byhand.mesh'\n  port: '80'\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n"
	if err := os.WriteFile(filepath.Join(resources, "by-hand.yaml"), []byte(vo), 0o644); err != nil {
		t.Fatal(err)
	}
	took := testutil.WaitFor(t, "the hand-written file's name on the open page", 2*time.Second, func() bool {
		return eval[string](b, `document.getElementById('vip-total').textContent`) == "1"
	})
	t.Logf("a file written by hand showed on the page %v later", took)
	if !eval[bool](b, `window.guiMarker === true`) {
		t.Error("the page was reloaded; it should have changed in place")
	}
	b.clean("a hand edit (directory)")
}
