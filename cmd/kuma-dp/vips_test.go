package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/agent"
	"github.com/kumadp/kuma-dp/dnsserver"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// Tests of `kuma-dp vips` on the repository's testdata: in-process through dispatch, and once
// through the built binary. Golden files: go test ./cmd/kuma-dp -run TestVIPsGolden -update

const (
	testDP       = "../../testdata/mesh/dataplane.yaml"
	testPolicies = "../../testdata/mesh/policies"
)

func vipsCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = dispatch(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

type vipsJSON struct {
	Entries []struct {
		Hostname string            `json:"hostname"`
		IPv4     string            `json:"ipv4"`
		IPv6     string            `json:"ipv6"`
		Ports    []uint32          `json:"ports"`
		Origin   map[string]string `json:"origin"`
		Tags     map[string]string `json:"tags"`
		Status   string            `json:"status"`
		Reason   string            `json:"reason"`
	} `json:"entries"`
	MeshExternalServices map[string]struct {
		VIP struct {
			Value string `json:"value"`
			Type  string `json:"type"`
		} `json:"vip"`
		Addresses []map[string]any `json:"addresses"`
	} `json:"meshExternalServices"`
}

func vipsRun(t *testing.T, extra ...string) vipsJSON {
	t.Helper()
	args := append([]string{"vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "json"}, extra...)
	code, out, errOut := vipsCmd(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v vipsJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	return v
}

// available maps each available hostname to "ipv4 ipv6".
func (v vipsJSON) available() map[string]string {
	m := map[string]string{}
	for _, e := range v.Entries {
		if e.Status == "Available" {
			m[e.Hostname] = e.IPv4 + " " + e.IPv6
		}
	}
	return m
}

func TestVIPsListsTestdataNames(t *testing.T) {
	v := vipsRun(t)
	avail := v.available()
	svcPool, extPool := netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("242.0.0.0/8")
	v6 := netip.MustParsePrefix("fd00:fd00::/64")
	for _, tc := range []struct{ host, pool string }{
		{"httpbin.mesh", "service"},
		{"v1.backend.mesh", "service"},
		{"v2.backend.mesh", "service"},
		{"backend.zone-1.mesh", "service"},
		{"backend.zone-2.mesh", "service"},
		{"web.mesh", "service"},
		{"mydomain.svc.meshext.local", "external"},
	} {
		got, ok := avail[tc.host]
		if !ok {
			t.Errorf("%s: not listed", tc.host)
			continue
		}
		f := strings.Fields(got)
		a4, err4 := netip.ParseAddr(f[0])
		a6, err6 := netip.ParseAddr(f[1])
		if err4 != nil || err6 != nil || !v6.Contains(a6) {
			t.Errorf("%s: %q is not an IPv4 + IPv6 twin", tc.host, got)
			continue
		}
		if want := tc.pool == "external"; extPool.Contains(a4) != want || !svcPool.Contains(a4) {
			t.Errorf("%s: %s not from the %s pool", tc.host, a4, tc.pool)
		}
		if b6, b4 := a6.As16(), a4.As4(); !bytes.Equal(b6[12:], b4[:]) {
			t.Errorf("%s: %s is not the twin of %s", tc.host, a6, a4)
		}
	}
	st, ok := v.MeshExternalServices["mydomain"]
	if !ok || st.VIP.Type != "Kuma" || st.VIP.Value+" " != avail["mydomain.svc.meshext.local"][:len(st.VIP.Value)+1] {
		t.Errorf("mydomain status = %+v", st)
	}
}

func TestVIPsTwoRunsSameVIPs(t *testing.T) {
	a, b := vipsRun(t).available(), vipsRun(t).available()
	if len(a) == 0 || !vipsEqual(a, b) {
		t.Errorf("two runs differ:\n%v\n%v", a, b)
	}
}

func vipsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// copyPolicies copies testdata's policies into a temporary directory.
func vipsCopyPolicies(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(testPolicies, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no policies: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Base(f)), string(b))
	}
	return dir
}

const newServiceDPs = `type: Dataplane
mesh: default
name: aaa-new-1
networking:
  address: 10.9.0.1
  inbound:
    - port: 80
      tags:
        kuma.io/service: aaa-new
        version: v1
        kuma.io/zone: zone-1
---
type: Dataplane
mesh: default
name: zzz-new-1
networking:
  address: 10.9.0.2
  inbound:
    - port: 80
      tags:
        kuma.io/service: zzz-new
        version: v7
        kuma.io/zone: zone-3
`

func TestVIPsAddingAServiceMovesNothing(t *testing.T) {
	for _, withState := range []bool{false, true} {
		name := "without state file"
		if withState {
			name = "with state file"
		}
		t.Run(name, func(t *testing.T) {
			dir := vipsCopyPolicies(t)
			state := filepath.Join(t.TempDir(), "vips-state.json")
			run := func() map[string]string {
				args := []string{"vips", "--dataplane-file", testDP, "--policies-dir", dir, "-o", "json"}
				if withState {
					args = append(args, "--state-file", state)
				}
				code, out, errOut := vipsCmd(t, args...)
				if code != exitOK {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				var v vipsJSON
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Fatal(err)
				}
				return v.available()
			}
			before := run()
			writeFile(t, filepath.Join(dir, "new-services.yaml"), newServiceDPs)
			after := run()
			for h, v := range before {
				if after[h] != v {
					t.Errorf("%s moved: %s -> %s", h, v, after[h])
				}
			}
			for _, h := range []string{"aaa-new.mesh", "v7.zzz-new.mesh", "zzz-new.zone-3.mesh"} {
				if _, ok := after[h]; !ok {
					t.Errorf("new name %s missing", h)
				}
			}
			if withState {
				b, err := os.ReadFile(state)
				if err != nil || !bytes.Contains(b, []byte(`"v1.backend.mesh"`)) {
					t.Errorf("state file: %v %s", err, b)
				}
			}
		})
	}
}

func TestVIPsStateFileKeepsVIPs(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	// A remembered VIP wins over the hash: write one, run, and see it used.
	writeFile(t, state, `{"version":1,"vips":{"v1.backend.mesh":"240.1.2.3"}}`)
	if got := vipsRun(t, "--state-file", state).available()["v1.backend.mesh"]; !strings.HasPrefix(got, "240.1.2.3 ") {
		t.Errorf("v1.backend.mesh = %q, want the state file's 240.1.2.3", got)
	}
	// A corrupt state file is ignored (logged), never fatal.
	writeFile(t, state, `{"version":1,"vips":`)
	if got := vipsRun(t, "--state-file", state).available(); !vipsEqual(got, vipsRun(t).available()) {
		t.Error("a corrupt state file changed the result")
	}
}

func TestVIPsInvalidInputListsEveryError(t *testing.T) {
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", "../../testdata/invalid")
	if code != exitInvalid {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitInvalid, out, errOut)
	}
	files, _ := filepath.Glob("../../testdata/invalid/*.yaml")
	if len(files) == 0 {
		t.Fatal("no invalid testdata")
	}
	for _, f := range files {
		if !strings.Contains(errOut, f+"#") {
			t.Errorf("no error located in %s#N:\n%s", f, errOut)
		}
	}
	for _, want := range []string{"conf.hosts: unknown field, did you mean host?", `(value "70000")`, "networking.address"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestVIPsUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vips"}, "--dataplane-file is required"},
		{[]string{"vips", "--bogus"}, "unknown flag"},
		{[]string{"vips", "--dataplane-file", testDP, "-o", "yaml"}, `--output "yaml"`},
		{[]string{"vips", "--dataplane-file", testDP, "--ipv6-prefix", "fd00::/120"}, `--ipv6-prefix "fd00::/120": prefix /120 is longer than /96`},
		{[]string{"vips", "--dataplane-file", testDP, "--service-cidr", "240.0.0.0/33"}, `--service-cidr "240.0.0.0/33"`},
		{[]string{"vips", "--dataplane-file", testDP, "--external-cidr", "fd00::/8"}, `--external-cidr "fd00::/8": not an IPv4 prefix`},
		{[]string{"vips", "--dataplane-file", testDP, "extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := vipsCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
	code, out, _ := vipsCmd(t, "vips", "--help")
	if code != exitOK || !strings.Contains(out, "--dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

func TestVIPsExplain(t *testing.T) {
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "--explain", "V1.Backend.Mesh.")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"v1.backend.mesh: Available", `VirtualOutbound "my-service-by-version"`,
		"selector: {kuma.io/service=*,version=*}", "tuple:    {kuma.io/service=backend,version=v1}", "beat "} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "--explain", "httpbin.mesh")
	if !strings.Contains(out, "port 8080:") || !strings.Contains(out, `default name of service "httpbin"`) {
		t.Errorf("multi-port explain:\n%s", out)
	}
	code, _, errOut = vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "--explain", "nope.mesh")
	if code != exitInvalid || !strings.Contains(errOut, `"nope.mesh"`) {
		t.Errorf("unknown host: exit %d, %q", code, errOut)
	}
}

func TestVIPsGolden(t *testing.T) {
	for _, format := range []string{"json", "zone", "table"} {
		t.Run(format, func(t *testing.T) {
			code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", format)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			testutil.Golden(t, filepath.Join("testdata", "vips."+format+".golden"), []byte(out))
		})
	}
}

func TestVIPsZoneParses(t *testing.T) {
	_, out, _ := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "zone")
	avail := vipsRun(t).available()
	zp := dns.NewZoneParser(strings.NewReader(out), "", "vips.zone")
	var soa, a, aaaa int
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		name := strings.TrimSuffix(rr.Header().Name, ".")
		switch r := rr.(type) {
		case *dns.SOA:
			soa++
		case *dns.A:
			if name+"." == vipsNS {
				continue // the NS's glue
			}
			a++
			if !strings.HasPrefix(avail[name], r.A.String()+" ") {
				t.Errorf("A %s %s; json says %q", name, r.A, avail[name])
			}
		case *dns.AAAA:
			aaaa++
			if !strings.HasSuffix(avail[name], " "+r.AAAA.String()) {
				t.Errorf("AAAA %s %s; json says %q", name, r.AAAA, avail[name])
			}
		}
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("zone does not parse: %v\n%s", err, out)
	}
	hosts := 0
	for name := range avail {
		if vipsIsHostname(name) {
			hosts++
		} else if !strings.Contains(out, "; "+name+".\tIN\tA\t") {
			t.Errorf("%s, no hostname, is not listed as a comment", name)
		}
	}
	if soa != 1 || a != hosts || aaaa != hosts || hosts == len(avail) {
		t.Errorf("SOA %d, A %d, AAAA %d; want 1, %d, %d (of %d names, those with '_' commented out)", soa, a, aaaa, hosts, hosts, len(avail))
	}
}

// `vips -o zone` is a zone file BIND and nsd load as written: an NS at the apex (with its
// glue inside the zone), and no A owner check-names refuses (named-checkzone refused it for
// both).
func TestVIPsZoneChecked(t *testing.T) {
	_, out, _ := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "zone")
	path := filepath.Join(t.TempDir(), "vips.zone")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	origin := strings.Fields(out[strings.Index(out, "$ORIGIN"):])[1]
	ran := 0
	for _, checker := range []string{"named-checkzone", "nsd-checkzone"} {
		bin, err := exec.LookPath(checker)
		if err != nil {
			t.Logf("%s not installed (bind9-utils, nsd): not run", checker)
			continue
		}
		ran++
		if b, err := exec.Command(bin, origin, path).CombinedOutput(); err != nil {
			t.Errorf("%s %s: %v\n%s\n%s", checker, origin, err, b, out)
		}
	}
	if ran == 0 {
		t.Skip("neither named-checkzone nor nsd-checkzone is installed (make test installs them)")
	}
}

func TestVIPsBinary(t *testing.T) {
	bin := kumaDP(t)
	cmd := exec.Command(bin, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	_, inProc, _ := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "json")
	if string(out) != inProc {
		t.Error("the binary's output differs from the in-process run")
	}
	cmd = exec.Command(bin, "vips", "--dataplane-file", testDP, "--policies-dir", "../../testdata/invalid")
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != exitInvalid {
		t.Errorf("invalid input: %v, want exit %d", err, exitInvalid)
	}
}

// `vips -o zone` and the resolver say one TTL: the zone's $TTL and negative TTL are the
// resolver's default, and --dns-ttl (the same flag as run's) changes both.
func TestVIPsZoneTTLIsTheResolvers(t *testing.T) {
	t.Chdir("../..")
	for _, tc := range []struct {
		args []string
		ttl  int
	}{{nil, int(time.Duration(agent.Defaults().DNS.TTL) / time.Second)}, {[]string{"--dns-ttl", "45s"}, 45}} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"vips", "--dataplane-file", "testdata/mesh/dataplane.yaml", "--policies-dir", "testdata/mesh/policies", "-o", "zone"}, tc.args...)
		if rc := dispatch(args, &stdout, &stderr); rc != exitOK {
			t.Fatalf("%v: exit %d: %s", args, rc, stderr.String())
		}
		out := stdout.String()
		if !strings.Contains(out, fmt.Sprintf("$TTL %d\n", tc.ttl)) || !strings.Contains(out, fmt.Sprintf("%d ) ; negative TTL", tc.ttl)) {
			t.Fatalf("%v: want $TTL and negative TTL %d:\n%s", tc.args, tc.ttl, out[:min(len(out), 300)])
		}
	}
	if agent.Defaults().DNS.TTL != agent.Duration(dnsserver.DefaultTTL*time.Second) {
		t.Fatal("the agent's default TTL is not the resolver's")
	}
}

// Kuma's default HostnameGenerator selects the MeshExternalServices created in the zone
// (kuma.io/origin: zone, which Kuma's zone control plane stamps and so does the decoder): a
// MeshExternalService written without labels gets its hostname (it had a VIP and none); one
// synced from a global control plane keeps its origin, and --explain says why the
// generator selects nothing for it.
func TestKumaDefaultGeneratorSelectsZoneOrigin(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "kuma-defaults.yaml"), `type: HostnameGenerator
name: local-mesh-external-service
spec:
  selector:
    meshExternalService:
      matchLabels:
        kuma.io/origin: zone
  template: "{{ .DisplayName }}.extsvc.mesh.local"
---
type: MeshExternalService
name: aurora
mesh: default
spec:
  match: {type: HostnameGenerator, port: 5432, protocol: tcp}
  endpoints: [{address: aurora.example.com, port: 5432}]
---
type: MeshExternalService
name: synced
mesh: default
labels:
  kuma.io/origin: global
spec:
  match: {type: HostnameGenerator, port: 443, protocol: tcp}
  endpoints: [{address: api.example.com, port: 443}]
`)
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", dir)
	if code != exitOK || !strings.Contains(out, "aurora.extsvc.mesh.local") || strings.Contains(out, "synced.extsvc") {
		t.Fatalf("vips: exit %d, want aurora.extsvc.mesh.local and no name for synced:\n%s%s", code, out, errOut)
	}
	code, out, errOut = vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", dir, "--explain", "synced")
	for _, want := range []string{
		"MeshExternalService synced: VIP 242.",
		"HostnameGenerator local-mesh-external-service: selects nothing here: label kuma.io/origin is global, the generator selects zone",
		"no generator selects it: it has a VIP but no hostname",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("--explain synced: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	code, out, _ = vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", dir, "--explain", "local-mesh-external-service")
	if code != exitOK || !strings.Contains(out, "HostnameGenerator local-mesh-external-service: aurora.extsvc.mesh.local Available") {
		t.Errorf("--explain of the generator: exit %d\n%s", code, out)
	}
}
