package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Kuma 2.x's example mesh (testdata/kuma2: Kuma's documented MeshService, HostnameGenerator,
// MeshHTTPRoute and MeshTCPRoute examples) in both forms.
var kuma2Forms = []string{"universal", "kubernetes"}

func kuma2Paths(form string) (dpFile, policies string) {
	root := filepath.Join("..", "..", "testdata", "kuma2")
	return filepath.Join(root, "dataplane.yaml"), filepath.Join(root, form)
}

// `kuma-dp vips` as a user runs it: the MeshServices' names from the HostnameGenerators,
// VIPs from 241.0.0.0/8 with their IPv6 twins, each MeshService's status; the same in both
// forms.
func TestKuma2ThroughVIPs(t *testing.T) {
	var outs []string
	for _, form := range kuma2Forms {
		dpFile, policies := kuma2Paths(form)
		code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", policies, "-o", "json")
		if code != exitOK {
			t.Fatalf("%s: exit %d\n%s", form, code, errOut)
		}
		outs = append(outs, out)
		var v struct {
			Entries []struct {
				Hostname, IPv4, IPv6, Status, MeshService string
				Ports                                     []uint32
			}
			MeshServices map[string]struct {
				VIPs      []struct{ IP string }
				Addresses []struct{ Hostname, Status string }
			}
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		pool := netip.MustParsePrefix("241.0.0.0/8")
		found := map[string]bool{}
		for _, e := range v.Entries {
			if e.MeshService == "" {
				continue
			}
			found[e.Hostname] = true
			if ip, err := netip.ParseAddr(e.IPv4); err != nil || !pool.Contains(ip) || e.IPv6 == "" || e.Status != "Available" {
				t.Errorf("%s: %s: %s %s %s, want an available VIP in %s with its twin", form, e.Hostname, e.IPv4, e.IPv6, e.Status, pool)
			}
			if st := v.MeshServices[e.MeshService]; len(st.VIPs) != 1 || st.VIPs[0].IP != e.IPv4 {
				t.Errorf("%s: %s's status VIPs %v, want %s", form, e.MeshService, st.VIPs, e.IPv4)
			}
		}
		for _, h := range []string{"backend.kuma-demo.mesh", "backend.svc.mesh.local", "backend-v2.kuma-demo.mesh", "redis.svc.mesh.local"} {
			if !found[h] {
				t.Errorf("%s: %s not served", form, h)
			}
		}
	}
	if outs[0] != outs[1] {
		t.Errorf("the two forms give different tables:\n%s\n---\n%s", outs[0], outs[1])
	}
}

// `kuma-dp run` on each form, with the stand-in Envoy: dig gets the MeshServices' A and
// AAAA answers from the agent's resolver, and Envoy receives the MeshService listeners, the
// merged MeshHTTPRoutes and the MeshTCPRoute, none refused.
func TestE2EKuma2Run(t *testing.T) {
	t.Parallel()
	dig, digErr := exec.LookPath("dig")
	for _, form := range kuma2Forms {
		dpFile, policies := kuma2Paths(form)
		report := filepath.Join(t.TempDir(), "envoy-report.jsonl")
		p := startAgentEnv(t, []string{"FAKE_ENVOY_REPORT=" + report}, dpFile, policies,
			"--envoy=true", "--binary-path", fakeEnvoy(t), "--drain-time", "1s")
		a, rc := p.query("backend.kuma-demo.mesh", dns.TypeA)
		aaaa, _ := p.query("backend.kuma-demo.mesh", dns.TypeAAAA)
		if rc != dns.RcodeSuccess || len(a) != 1 || !strings.HasPrefix(a[0], "241.") || len(aaaa) != 1 {
			t.Fatalf("%s: backend.kuma-demo.mesh: A %v AAAA %v (rcode %d)", form, a, aaaa, rc)
		}
		if digErr == nil {
			host, port, _ := strings.Cut(p.ready.DNSUDP[0], ":")
			out, err := exec.Command(dig, "+short", "+time=2", "+tries=1", "@"+host, "-p", port, "redis.svc.mesh.local", "AAAA").CombinedOutput()
			if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "fd00:fd00::f1") {
				t.Errorf("%s: dig redis.svc.mesh.local AAAA: %s %v", form, out, err)
			}
		} else {
			t.Logf("dig not installed: the answers were checked with the Go client only")
		}
		waitFor(t, "Envoy receiving the MeshService listeners", 10*time.Second, func() bool {
			return strings.Contains(strings.Join(listenersSeen(readReport(t, report)), " "), "outbound:"+a[0]+":3001")
		})
		_, body := p.get("/config_dump")
		for _, want := range []string{
			`"name": "meshservice_backend_3001"`,
			`"name": "meshservice_redis_16739"`,
			`"pathSeparatedPrefix": "/v2"`,
			`"name": "route-to-backend-v2/rules[0]/matches[0]"`,
			`"name": "backend_kuma-demo_svc_3001{version=v1_experimental}"`,
			`"key": "x-custom-header"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: /config_dump lacks %s", form, want)
			}
		}
		// tcp-route-1: redis's port 6739 goes to external-backend.
		redis, _ := p.query("redis.svc.mesh.local", dns.TypeA)
		if len(redis) != 1 {
			t.Fatalf("%s: redis.svc.mesh.local: %v", form, redis)
		}
		if l := namedObject(t, body, "outbound:"+redis[0]+":6739"); !strings.Contains(l, `"name":"external-backend"`) {
			t.Errorf("%s: the listener of redis:6739 does not send to external-backend:\n%.2000s", form, l)
		}
		if _, m := p.get("/metrics"); !strings.Contains(m, "kuma_dp_envoy_update_failures_total 0") {
			t.Errorf("%s: Envoy's resources were refused:\n%s", form, lineWith(m, "envoy_update_failures"))
		}
		if _, v := p.get("/vips"); !strings.Contains(v, `"meshServices"`) || !strings.Contains(v, `"coreName": "all"`) {
			t.Errorf("%s: /vips has no MeshService status", form)
		}
	}
}

// namedObject is the JSON of the first object named name in the document doc ("" if none).
func namedObject(t *testing.T, doc, name string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	var find func(v any) any
	find = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			if v["name"] == name {
				return v
			}
			for _, x := range v {
				if f := find(x); f != nil {
					return f
				}
			}
		case []any:
			for _, x := range v {
				if f := find(x); f != nil {
					return f
				}
			}
		}
		return nil
	}
	f := find(v)
	if f == nil {
		return ""
	}
	b, _ := json.Marshal(f)
	return string(b)
}

// --mesh-service-cidr moves the MeshServices' VIPs; a pool overlapping the external one is
// a usage error naming the flag.
func TestKuma2MeshServiceCIDR(t *testing.T) {
	dpFile, policies := kuma2Paths("universal")
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", policies, "--mesh-service-cidr", "10.9.0.0/16")
	if code != exitOK || !strings.Contains(out, "backend.kuma-demo.mesh") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "  HostnameGenerator/") {
			continue
		}
		rows++
		if !strings.Contains(line, " 10.9.") {
			t.Errorf("a MeshService name outside 10.9.0.0/16: %s", line)
		}
	}
	if rows != 5 {
		t.Errorf("%d MeshService names, want 5:\n%s", rows, out)
	}
	code, _, errOut = vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", policies, "--mesh-service-cidr", "242.0.0.0/8")
	if code != exitUsage || !strings.Contains(errOut, `--mesh-service-cidr "242.0.0.0/8": overlaps ExternalCIDR 242.0.0.0/8`) {
		t.Errorf("an overlapping pool: exit %d, %s", code, errOut)
	}
}

// The older and the newer API in one mesh: a VirtualOutbound (created later) rendering a
// MeshService's hostname loses it by the one collision rule (the older wins), and
// `kuma-dp vips --explain` says so.
func TestKuma2CollisionWithVirtualOutbound(t *testing.T) {
	dir := t.TempDir()
	_, policies := kuma2Paths("universal")
	dpFile, _ := kuma2Paths("universal")
	for _, f := range []string{"dataplanes.yaml", "meshservices.yaml", "hostnamegenerators.yaml", "routes.yaml"} {
		b, err := os.ReadFile(filepath.Join(policies, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), string(b))
	}
	writeFile(t, filepath.Join(dir, "vo.yaml"), `type: VirtualOutbound
mesh: default
name: legacy-redis
creationTime: 2025-01-01T00:00:00Z
selectors:
- match: {kuma.io/service: redis}
conf:
  host: "{{.service}}.svc.mesh.local"
  port: 6739
  parameters: [{name: service, tagKey: kuma.io/service}]
`)
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", dpFile, "--policies-dir", dir, "--explain", "redis.svc.mesh.local")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, want := range []string{`produced by HostnameGenerator "local-universal-mesh-service"`, `VirtualOutbound "legacy-redis"`, "it is older"} {
		if !strings.Contains(out, want) {
			t.Errorf("--explain lacks %q:\n%s", want, out)
		}
	}
}
