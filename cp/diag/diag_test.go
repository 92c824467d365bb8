package diag

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumadp/kuma-dp/cp/connlimit"
)

// get starts a diagnostics server (profiles or not) and answers GET path's status and body.
func get(t *testing.T, profiles bool, path string) (int, string) {
	t.Helper()
	s, err := New("127.0.0.1:0", connlimit.DefaultMetrics, prometheus.NewRegistry(), func() error { return nil }, profiles)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Run(ctx)
	resp, err := http.Get("http://" + s.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	if code, body := get(t, true, "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("with profiles, /debug/pprof/heap = %d %.80q, want 200 and a heap profile", code, body)
	}
	if code, body := get(t, true, "/"); !strings.Contains(body, "/debug/pprof/") {
		t.Errorf("with profiles, / = %d %q, want /debug/pprof/ listed", code, body)
	}
	if code, _ := get(t, false, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("without profiles, /debug/pprof/heap = %d, want 404", code)
	}
	if _, body := get(t, false, "/"); strings.Contains(body, "pprof") {
		t.Errorf("without profiles, / = %q lists pprof", body)
	}
}
