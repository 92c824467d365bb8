package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
