// Package grafana holds the Grafana dashboards of kuma-cp and kuma-dp (JSON, imported as
// they are); its test checks every metric their PromQL reads against what the binaries
// really export.
package grafana

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// dashboard is what the test reads of a dashboard: its panels' queries.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T, file string) dashboard {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

var (
	matchers  = regexp.MustCompile(`\{[^}]*\}`)
	ranges    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	strs      = regexp.MustCompile(`"[^"]*"`)
	ident     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	keywords  = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
	templated = regexp.MustCompile(`label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// metricNames are the metric names a PromQL expression reads: its identifiers that are
// neither functions (followed by "("), keywords, label names (in matchers or groupings)
// nor strings.
func metricNames(expr string) []string {
	e := strs.ReplaceAllString(expr, " ")
	e = matchers.ReplaceAllString(e, " ")
	e = ranges.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	var out []string
	for _, m := range ident.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") || slices.Contains(keywords, strings.ToLower(strings.TrimSpace(m))) {
			continue
		}
		out = append(out, strings.TrimSpace(m))
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (code) (rate(kuma_cp_api_writes_total{job="$job",instance=~"$instance"}[5m]))`:                  "kuma_cp_api_writes_total",
		`histogram_quantile(0.99, sum by (le) (rate(kuma_dp_model_reload_duration_seconds_bucket{a="b"}[5m])))`: "kuma_dp_model_reload_duration_seconds_bucket",
		`kuma_dp_vip_pool_used{x="y"} / kuma_dp_vip_pool_size`:                                                  "kuma_dp_vip_pool_used kuma_dp_vip_pool_size",
		`count(kuma_dp_ready{job="$job"} == 0) or vector(0)`:                                                    "kuma_dp_ready",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}

// missing lists the dashboard's metric names (queries and variables) that exported lacks,
// with the panel naming each; every panel must have a query.
func missing(d dashboard, exported map[string]bool) []string {
	var out []string
	check := func(where, expr string, names []string) {
		if len(names) == 0 {
			out = append(out, where+": no metric in "+expr)
		}
		for _, n := range names {
			if !exported[n] {
				out = append(out, where+": "+n)
			}
		}
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			out = append(out, p.Title+": no query")
		}
		for _, tg := range p.Targets {
			check(p.Title, tg.Expr, metricNames(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if m := templated.FindStringSubmatch(v.Definition); m != nil {
			check("variable "+v.Definition, v.Definition, []string{m[1]})
		}
	}
	return out
}

// The check can fail: a dashboard reading a metric no binary exports is caught.
func TestMissingMetricCaught(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal([]byte(`{"panels":[{"title":"p","targets":[{"expr":"rate(kuma_cp_nope_total[5m]) + kuma_cp_leader"}]},{"title":"empty"}]}`), &d); err != nil {
		t.Fatal(err)
	}
	got := missing(d, map[string]bool{"kuma_cp_leader": true})
	if strings.Join(got, "; ") != "p: kuma_cp_nope_total; empty: no query" {
		t.Errorf("missing: %v", got)
	}
}

var bins testutil.GoBinaries

func TestMain(m *testing.M) { bins.RunTests(m) }

// Every metric of every panel of both dashboards is exported by its binary: kuma-cp on
// etcd with resources written through its API and an agent connected, and that agent.
func TestDashboardsReadExportedMetrics(t *testing.T) {
	cpBin := bins.Build(t, "kuma-cp", "../../cmd/kuma-cp")
	dpBin := bins.Build(t, "kuma-dp", "../../cmd/kuma-dp")
	c := etcdtest.Start(t, 1)
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tok, []byte("grafana\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cp struct{ Address, API, Metrics string }
	start(t, filepath.Join(dir, "cp.json"), &cp, cpBin, "serve", "--store", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints(), ","),
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--admin-token-file", tok)
	var sources []api.Source
	paths, _ := filepath.Glob("../../testdata/mesh/policies/*.yaml")
	for _, p := range append(paths, "../../testdata/mesh/dataplane.yaml", "../../testdata/routes/shard-a.yaml") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, api.Source{Name: p, Data: b})
	}
	if _, err := api.NewClient("http://"+cp.API, "grafana").ApplyAll(context.Background(), sources); err != nil {
		t.Fatal(err)
	}
	var dp struct{ Admin string }
	start(t, filepath.Join(dir, "dp.json"), &dp, dpBin, "run", "--cp-address", "grpc://"+cp.Address, "--name", "web-1", "--mesh", "default",
		"--envoy=false", "--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", testutil.NXDomainUpstream(t), "--work-dir", t.TempDir(), "--ready-file", filepath.Join(dir, "dp.json"))
	for file, url := range map[string]string{"kuma-cp.json": "http://" + cp.Metrics + "/metrics", "kuma-dp.json": "http://" + dp.Admin + "/metrics"} {
		exported := scrape(t, url)
		d := load(t, file)
		if len(d.Panels) < 8 {
			t.Errorf("%s: %d panels", file, len(d.Panels))
		}
		if m := missing(d, exported); len(m) > 0 {
			t.Errorf("%s reads metrics %s does not export:\n  %s", file, url, strings.Join(m, "\n  "))
		}
	}
}

// start runs a binary until the test ends and reads the ready file it writes (kuma-cp's
// --ready-file is appended here; kuma-dp's is in args).
func start(t *testing.T, ready string, out any, bin string, args ...string) {
	t.Helper()
	if strings.HasSuffix(bin, "kuma-cp") {
		args = append(args, "--ready-file", ready)
	}
	p := testutil.Start(t, filepath.Base(bin), bin, args...)
	p.ReadyJSON(t, ready, out, 30*time.Second)
}

// scrape is the metric names of a /metrics page (a histogram's _bucket, _sum and _count).
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out
}
