package mesh

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

const (
	exampleDP       = "../testdata/mesh/dataplane.yaml"
	examplePolicies = "../testdata/mesh/policies"
)

func names[T Resource](rs []T) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetMeta().Name
	}
	return out
}

// TestExampleMesh loads the repository's example mesh and checks every design example is in it.
func TestExampleMesh(t *testing.T) {
	s, err := Load(exampleDP, examplePolicies)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Self.Name != "web-1" || s.Mesh != "default" {
		t.Errorf("self %s in mesh %s, want web-1 in default", s.Self.Name, s.Mesh)
	}
	want := map[string][]string{
		"dataplanes": {"backend-v1-zone-1", "backend-v1-zone-2", "backend-v2-zone-1", "backend-v2-zone-2",
			"httpbin-1", "mobile-1", "my-service-1", "payments-7d9f8-abcde.payments-ns", "redis-1", "web-1"},
		"virtualoutbounds": {"backend-grpc", "default", "kuma-versioned", "my-service", "my-service-by-version",
			"service-by-zone", "vh-my-service", "vh-my-service-by-version", "vh-my-service-by-zone",
			"vh-my-service-default", "vo001-my-service", "vo001-my-service-by-version",
			"vo001-my-service-by-zone", "vo001-my-service-default"},
		"trafficroutes":        {"all-to-httpbin", "rule-name", "rule-name-k8s", "web-to-backend"},
		"meshexternalservices": {"example", "ext-svc", "ignored-legacy", "lambda", "lambda-example", "mydomain", "mydomain-zone"},
		"hostnamegenerators":   {"k8s-meshext-hostnames", "k8s-zone-hostnames", "team-hostnames", "zone-hostnames"},
	}
	got := map[string][]string{
		"dataplanes":           names(s.Dataplanes),
		"virtualoutbounds":     names(s.VirtualOutbounds),
		"trafficroutes":        names(s.TrafficRoutes),
		"meshexternalservices": names(s.MeshExternalServices),
		"hostnamegenerators":   names(s.HostnameGenerators),
	}
	for k := range want {
		if strings.Join(got[k], ",") != strings.Join(want[k], ",") {
			t.Errorf("%s:\n got %q\nwant %q", k, got[k], want[k])
		}
	}
	// Every hostname the README promises comes out of the example's templates.
	hosts := renderAll(t, s)
	for _, h := range []string{"httpbin.mesh:80", "httpbin.mesh:8080", "v1.backend.mesh:8080", "v2.backend.mesh:8080",
		"backend.zone-1.mesh:80", "backend.zone-2.mesh:80", "backend-v1.mesh:80", "backend.grpc.mesh:9090",
		"payments_payments-ns_svc_8080.mesh:80"} {
		if !hosts[h] {
			t.Errorf("no VirtualOutbound renders %s", h)
		}
	}
	// The MeshExternalService design's HostnameGenerator gives mydomain.svc.meshext.local.
	for _, hg := range s.HostnameGenerators {
		if hg.Name != "k8s-meshext-hostnames" {
			continue
		}
		ht, err := hostname.CompileHostnameGenerator(hg.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := ht.Render(hostname.HGData{Name: "mydomain"}); err != nil || h != "mydomain.svc.meshext.local" {
			t.Errorf("k8s-meshext-hostnames renders %q, %v", h, err)
		}
	}
	if s.Hash == "" {
		t.Error("no snapshot hash")
	}
	// Loading twice gives the same hash.
	s2, err := Load(exampleDP, examplePolicies)
	if err != nil || s2.Hash != s.Hash {
		t.Errorf("second load hash %s, want %s (%v)", s2.Hash, s.Hash, err)
	}
}

// renderAll renders every VirtualOutbound over every tuple of the mesh's inbound tags, the
// way the allocator does, and returns host:port set.
func renderAll(t *testing.T, s *Snapshot) map[string]bool {
	out := map[string]bool{}
	for _, vo := range s.VirtualOutbounds {
		vt, err := hostname.CompileVirtualOutbound(vo.Conf.Templates())
		if err != nil {
			t.Fatalf("%s: %v", vo.Name, err)
		}
		for _, dp := range s.Dataplanes {
			for _, in := range dp.Networking.Inbound {
				matched := false
				for _, sel := range vo.Selectors {
					matched = matched || sel.Matches(in.Tags)
				}
				if !matched {
					continue
				}
				if h, p, err := vt.Render(in.Tags); err == nil {
					out[h+":"+itoa(p)] = true
				}
			}
		}
	}
	return out
}

func itoa(p uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + p%10)
		if p /= 10; p == 0 {
			break
		}
	}
	return string(b[i:])
}

// TestInvalidTestdata: every malformed file is reported, all at once, each error with its
// file#document, resource, field path and value (golden file).
func TestInvalidTestdata(t *testing.T) {
	_, err := Load(exampleDP, "../testdata/invalid")
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Load error = %v, want Errors", err)
	}
	files := map[string]bool{}
	for _, e := range es {
		file, _, _ := strings.Cut(e.Source, "#")
		files[filepath.Base(file)] = true
	}
	entries, _ := os.ReadDir("../testdata/invalid")
	for _, e := range entries {
		if isResourceFile(e.Name()) && !files[e.Name()] {
			t.Errorf("no error reported for %s", e.Name())
		}
	}
	checkGolden(t, "invalid.golden", err.Error()+"\n")
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), []byte(got))
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dp := "type: Dataplane\nname: %s\nnetworking: {address: 10.0.0.1, inbound: [{port: 80, tags: {kuma.io/service: %s}}]}\n"
	two := write("two.yaml", strings.NewReplacer("%s", "a").Replace(dp)+"---\n"+strings.NewReplacer("%s", "b").Replace(dp))
	vo := write("vo.yaml", "type: VirtualOutbound\nname: v\nselectors: [{match: {kuma.io/service: a}}]\nconf: {host: a.mesh, port: 80}\n")
	one := write("one.yaml", strings.NewReplacer("%s", "a").Replace(dp))
	write("pol/a/x.yml", "type: VirtualOutbound\nname: dup\nselectors: [{match: {kuma.io/service: a}}]\nconf: {host: a.mesh, port: 80}\n")
	write("pol/b/y.json", `{"type":"VirtualOutbound","name":"dup","selectors":[{"match":{"kuma.io/service":"a"}}],"conf":{"host":"b.mesh","port":80}}`)
	write("pol/ignored.txt", "not a resource")
	write("pol/c.yaml", "type: Dataplane\nname: bad\n")

	tests := []struct {
		name, dp, dir string
		want          []string
	}{
		{"two resources", two, "", []string{two + ": the dataplane file must hold exactly one Dataplane, found 2 resources"}},
		{"not a dataplane", vo, "", []string{vo + `#1: virtualoutbound "v": the dataplane file must hold a Dataplane`}},
		{"missing file", filepath.Join(dir, "nope.yaml"), "", []string{filepath.Join(dir, "nope.yaml") + ": open " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"}},
		{"errors of every file at once", one, filepath.Join(dir, "pol"), []string{
			filepath.Join(dir, "pol/c.yaml") + `#1: dataplane "bad": networking.address: required`,
			filepath.Join(dir, "pol/c.yaml") + `#1: dataplane "bad": networking.inbound: at least one inbound is required (or a gateway)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.dp, tt.dir)
			if err == nil {
				t.Fatal("no error")
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors\n got %q\nwant %q", got, tt.want)
			}
		})
	}
	// Once c.yaml is fixed, the duplicate name across files is NewSnapshot's to report.
	write("pol/c.yaml", "")
	_, err := Load(one, filepath.Join(dir, "pol"))
	if err == nil || !strings.Contains(err.Error(), "duplicate VirtualOutbound name, also defined in "+filepath.Join(dir, "pol/a/x.yml#1")) {
		t.Errorf("duplicate: %v", err)
	}
}

func TestSnapshotMeshes(t *testing.T) {
	rs, err := Decode("m.yaml", []byte(`
type: Dataplane
mesh: other
name: o
networking: {address: 10.0.0.2, inbound: [{port: 80, tags: {kuma.io/service: o}}]}
---
kind: HostnameGenerator
metadata: {name: everywhere}
spec: {targetRef: {kind: MeshExternalService}, template: "{{ name }}.x"}
---
kind: HostnameGenerator
metadata: {name: only-other, labels: {kuma.io/mesh: other}}
spec: {targetRef: {kind: MeshExternalService}, template: "{{ name }}.y"}
---
kind: MeshExternalService
metadata: {name: m}
spec: {match: {type: HostnameGenerator, port: 80}, endpoints: [{address: 1.1.1.1, port: 80}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	self := &Dataplane{Meta: Meta{Mesh: "default", Name: "self"}}
	s, err := NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	got := append(append(names(s.Dataplanes), names(s.HostnameGenerators)...), names(s.MeshExternalServices)...)
	sort.Strings(got)
	if strings.Join(got, ",") != "everywhere,m,self" {
		t.Errorf("snapshot of mesh default holds %q, want everywhere,m,self", got)
	}
	if mes := s.MeshExternalServices[0]; mes.Mesh != "default" {
		t.Errorf("MeshExternalService without a mesh label: mesh %q, want default", mes.Mesh)
	}
}

// TestExampleMeshWholeDir: the CLI's example points --policies-dir at testdata/mesh, which
// holds the dataplane file too; the dataplane file's copy wins over the directory's.
func TestExampleMeshWholeDir(t *testing.T) {
	a, err := Load(exampleDP, "../testdata/mesh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(exampleDP, examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash {
		t.Errorf("loading testdata/mesh and testdata/mesh/policies differ: %s != %s", a.Hash, b.Hash)
	}
}

// BenchmarkLoadExample: decode + validate + snapshot of the example mesh (the dataplane
// file and 9 policy files, 40 documents).
func BenchmarkLoadExample(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(exampleDP, examplePolicies); err != nil {
			b.Fatal(err)
		}
	}
}
