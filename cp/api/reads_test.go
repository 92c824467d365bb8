package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

func readsDataplaneDoc(meshName, name, service string, gateway bool) []byte {
	if gateway {
		return []byte(fmt.Sprintf("type: Dataplane\nmesh: %s\nname: %s\nnetworking:\n  address: 10.0.0.1\n  gateway:\n    tags:\n      kuma.io/service: %s\n", meshName, name, service))
	}
	return []byte(fmt.Sprintf("type: Dataplane\nmesh: %s\nname: %s\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: %s\n", meshName, name, service))
}

// readsServer is an API on a directory store holding 25 dataplanes of mesh default (web-00..
// web-19 of service web, db-0..db-4 of db, db-0 a gateway), one of mesh other and a
// VirtualOutbound; web-03 and db-1 are online (db-1 on replica r2).
func readsServer(t *testing.T) (*Server, *Client, *agentList) {
	t.Helper()
	st, err := dirstore.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	putDoc := func(k store.Key, doc []byte) {
		if _, err := st.Put(ctx, k, doc, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		n := fmt.Sprintf("web-%02d", i)
		putDoc(store.Key{Mesh: "default", Type: "Dataplane", Name: n}, readsDataplaneDoc("default", n, "web", false))
	}
	for i := range 5 {
		n := fmt.Sprintf("db-%d", i)
		putDoc(store.Key{Mesh: "default", Type: "Dataplane", Name: n}, readsDataplaneDoc("default", n, "db", i == 0))
	}
	putDoc(store.Key{Mesh: "other", Type: "Dataplane", Name: "x"}, readsDataplaneDoc("other", "x", "x", false))
	putDoc(store.Key{Mesh: "default", Type: "VirtualOutbound", Name: "vo"}, []byte("type: VirtualOutbound\nmesh: default\nname: vo\nselectors:\n- match:\n    kuma.io/service: '*'\nconf:\n  host: '{{.service}}.vo.mesh'\n  port: '80'\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n"))
	agents := &agentList{items: []Agent{{Mesh: "default", Name: "db-1", Replicas: []string{"r2"}}, {Mesh: "default", Name: "web-03", Replicas: []string{"r1"}}}}
	srv := &Server{Store: st, Agents: agents.get, AgentsEvery: 50 * time.Millisecond}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, NewClient(hs.URL, ""), agents
}

type agentList struct {
	mu    sync.Mutex
	items []Agent
}

func (a *agentList) get() []Agent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Agent{}, a.items...)
}

func (a *agentList) set(items []Agent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.items = items
}

// Each mesh's counts: dataplanes online and offline (by the agents connected), services,
// policies by kind.
func TestMeshInsights(t *testing.T) {
	_, cl, _ := readsServer(t)
	got, err := cl.MeshInsights(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "default" || got[1].Name != "other" {
		t.Fatalf("meshes: %+v", got)
	}
	d := got[0]
	if d.Dataplanes != (DataplaneCounts{Total: 25, Online: 2, Offline: 23}) || d.Services.Total != 2 || d.Policies["VirtualOutbound"].Total != 1 {
		t.Errorf("default: %+v", d)
	}
	if o := got[1]; o.Dataplanes != (DataplaneCounts{Total: 1, Offline: 1}) || len(o.Policies) != 0 {
		t.Errorf("other: %+v", o)
	}
}

// dataplanes+insights: pages, with total counting every page's, filtered by name, tag,
// service, status, replica and gateway; following next gives every match once.
func TestDataplaneInsightsFilteredAndPaged(t *testing.T) {
	_, cl, _ := readsServer(t)
	ctx := context.Background()
	all := func(q url.Values) (names []string, total int) {
		t.Helper()
		page, err := cl.DataplaneOverviews(ctx, "default", q)
		if err != nil {
			t.Fatal(err)
		}
		total = page.Total
		for seen := 0; ; seen++ {
			if page.Total != total {
				t.Fatalf("%v: total %d on a later page, %d on the first", q, page.Total, total)
			}
			for _, it := range page.Items {
				names = append(names, it.Name+"/"+it.Insight.Status)
			}
			if page.Next == "" || seen > 30 {
				return names, total
			}
			next := page.Next
			page = DataplaneOverviews{}
			if err := cl.getPath(ctx, next, &page); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		query string
		want  string
		total int
	}{
		{"size=7", "", 25},
		{"size=3&service=db", "db-0/Offline db-1/Online db-2/Offline db-3/Offline db-4/Offline", 5},
		{"size=2&tag=kuma.io/service:web&status=online", "web-03/Online", 1},
		{"status=offline&name=db", "db-0/Offline db-2/Offline db-3/Offline db-4/Offline", 4},
		{"replica=r2", "db-1/Online", 1},
		{"gateway=true", "db-0/Offline", 1},
		{"size=4&gateway=false&service=db", "db-1/Online db-2/Offline db-3/Offline db-4/Offline", 4},
		{"tag=kuma.io/service:*&name=web-1", "", 10},
	}
	for _, c := range cases {
		q, _ := url.ParseQuery(c.query)
		names, total := all(q)
		if total != c.total || len(names) != c.total {
			t.Errorf("%s: total %d, %d items, want %d", c.query, total, len(names), c.total)
		}
		if c.want != "" && strings.Join(names, " ") != c.want {
			t.Errorf("%s: %v, want %s", c.query, names, c.want)
		}
	}
	for _, bad := range []string{"status=maybe", "tag=novalue", "gateway=yes", "size=0", "size=5000"} {
		q, _ := url.ParseQuery(bad)
		_, err := cl.DataplaneOverviews(ctx, "default", q)
		name, value, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), value) {
			t.Errorf("%s: %v, want a 400 naming the parameter and the value", bad, err)
		}
	}
}

// getPath reads an API path (a next link) into out.
func (c *Client) getPath(ctx context.Context, p string, out any) error {
	_, err := c.do(ctx, http.MethodGet, p, nil, 0, out)
	return err
}

// GET /events sends a change event after a write to the store (its watch: etcd's, the
// directory's rescans) and after an agent comes or goes, and nothing while nothing changes.
func TestEventsOnStoreAndAgentChanges(t *testing.T) {
	t.Run("etcd", func(t *testing.T) { eventsOn(t, store.NewEtcd(etcdtest.Start(t, 1).Client(), "/kuma")) })
	t.Run("dir", func(t *testing.T) {
		st, err := dirstore.NewStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		eventsOn(t, st)
	})
}

func eventsOn(t *testing.T, st store.Store) {
	agents := &agentList{}
	srv := &Server{Store: st, Agents: agents.get, AgentsEvery: 50 * time.Millisecond}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: ") || strings.HasPrefix(sc.Text(), "data: ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no event after %s within 10 s", what)
		}
		return ""
	}
	time.Sleep(200 * time.Millisecond) // the watch starts with the subscriber
	it, err := st.Put(ctx, store.Key{Mesh: "default", Type: "Dataplane", Name: "a"}, listDataplaneDoc("default", "a"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := next("a write"); l != "event: change" {
		t.Fatalf("got %q", l)
	}
	if l, want := next("a write"), fmt.Sprintf("data: %d", it.Version); l != want {
		t.Fatalf("got %q, want %q (the write's revision)", l, want)
	}
	agents.set([]Agent{{Mesh: "default", Name: "a"}})
	if l := next("an agent connected"); l != "event: change" {
		t.Fatalf("got %q", l)
	}
	next("an agent connected")
	select {
	case l := <-lines:
		t.Fatalf("an event with nothing changed: %q", l)
	case <-time.After(300 * time.Millisecond):
	}
}

// CloseEvents ends the open streams (an HTTP server's Shutdown would wait for them), and a
// stream asked for afterwards ends at once.
func TestCloseEventsEndsStreams(t *testing.T) {
	st, err := dirstore.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Store: st}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	srv.CloseEvents()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10 s of CloseEvents")
	}
	srv.CloseEvents() // twice is fine
	resp2, err := http.Get(hs.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if _, err := io.ReadAll(resp2.Body); err != nil {
		t.Fatalf("a stream after CloseEvents: %v", err)
	}
}
