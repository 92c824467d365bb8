package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// An answer that is not the API's error (a proxy's page, a mux's "404 page not found") is
// reported with its status text and body - it used to read "404 : ".
func TestClientErrorOfAnotherServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page here", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	_, err := NewClient(srv.URL, "").Get(context.Background(), "default", "dataplanes", "web-1")
	if err == nil || !strings.Contains(err.Error(), "404 Not Found") || !strings.Contains(err.Error(), "no such page here") {
		t.Fatalf("got %v", err)
	}
}

// A server whose next page points back to one already read (a broken cursor, a proxy
// caching by path) was followed until the command's timeout: the list stops at once saying
// why.
func TestClientListStopsAPagingLoop(t *testing.T) {
	for _, tc := range []struct{ name, page, want string }{
		{"back to the first page", `{"total": 1, "items": [{"type": "Dataplane", "mesh": "default", "name": "a"}], "next": "/meshes/default/dataplanes?size=500"}`, "read already"},
		{"a page pointing at itself", `{"total": 2, "items": [{"type": "Dataplane", "mesh": "default", "name": "a"}], "next": "/meshes/default/dataplanes?after=x"}`, "read already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n++
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tc.page))
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := NewClient(srv.URL, "").List(ctx, "default", "dataplanes")
			if err == nil || !strings.Contains(err.Error(), tc.want) || n > 2 {
				t.Fatalf("after %d requests: %v", n, err)
			}
		})
	}
}
