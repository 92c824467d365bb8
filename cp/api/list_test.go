package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

func listDataplaneDoc(meshName, name string) []byte {
	return []byte(fmt.Sprintf("type: Dataplane\nmesh: %s\nname: %s\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: web\n", meshName, name))
}

// getPage reads one page of a list at path (relative to the server).
func getPage(t *testing.T, base, path string) List {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	var l List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return l
}

// A list's total is every page's count (Kuma's API), not the page's size (it used to be
// len(items)), on every page; following next gives every resource exactly once - on the
// etcd store and on the directory store, one mesh and every mesh ("*").
func TestListTotalCountsEveryPage(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"etcd": func(t *testing.T) store.Store {
			st := store.NewEtcd(etcdtest.Start(t, 1).Client(), "/kuma")
			st.Timeout = 5 * time.Second
			return st
		},
		"dir": func(t *testing.T) store.Store {
			st, err := dirstore.NewStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			ctx := context.Background()
			// 7 dataplanes in default, 3 in "other", beside
			// resources of another type that no count of dataplanes includes.
			want := map[string][]string{}
			for m, n := range map[string]int{"default": 7, "other": 3} {
				for i := range n {
					name := fmt.Sprintf("dp-%d", i)
					if _, err := st.Put(ctx, store.Key{Mesh: m, Type: "Dataplane", Name: name}, listDataplaneDoc(m, name), 0); err != nil {
						t.Fatal(err)
					}
					want["*"] = append(want["*"], m+"/"+name)
					want[m] = append(want[m], m+"/"+name)
				}
			}
			for i := range 4 {
				k := store.Key{Mesh: "default", Type: "VirtualOutbound", Name: fmt.Sprintf("vo-%d", i)}
				doc := fmt.Sprintf("type: VirtualOutbound\nmesh: default\nname: %s\nselectors:\n- match:\n    kuma.io/service: \"*\"\nconf:\n  host: \"{{.service}}.mesh\"\n  port: \"80\"\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n", k.Name)
				if _, err := st.Put(ctx, k, []byte(doc), 0); err != nil {
					t.Fatal(err)
				}
			}
			srv := httptest.NewServer((&Server{Store: st, AdminToken: token}).Handler())
			t.Cleanup(srv.Close)
			for _, c := range []struct {
				mesh string
				size int
			}{{"default", 3}, {"default", 7}, {"default", 1}, {"*", 4}, {"other", 2}, {"default", 0}} {
				var got []string
				next := fmt.Sprintf("/meshes/%s/dataplanes?size=%d", c.mesh, c.size)
				for pages := 0; next != ""; pages++ {
					if pages > 20 {
						t.Fatalf("%s size %d: more than 20 pages", c.mesh, c.size)
					}
					l := getPage(t, srv.URL, next)
					if l.Total != len(want[c.mesh]) {
						t.Errorf("%s size %d, page %d: total %d, want %d", c.mesh, c.size, pages, l.Total, len(want[c.mesh]))
					}
					if c.size > 0 && len(l.Items) > c.size {
						t.Errorf("%s size %d: a page of %d", c.mesh, c.size, len(l.Items))
					}
					for _, it := range l.Items {
						got = append(got, it.Mesh+"/"+it.Name)
					}
					next = l.Next
				}
				w := slices.Sorted(slices.Values(want[c.mesh]))
				if !slices.Equal(got, w) {
					t.Errorf("%s size %d: pages gave %v, want each of %v once", c.mesh, c.size, got, w)
				}
			}
		})
	}
}
