package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The speed promises of `kuma-dp run`, measured on the real binary:
//
//	go test -run '^$' -bench 'BenchmarkRun' -benchtime 5x ./cmd/kuma-dp
//
// ms-to-ready is from exec to the ready file (model loaded, VIPs allocated, DNS answering),
// ms-self-reported the agent's own figure from its start to ready;
// ms-to-answer is from a policy file written to the new name answering over UDP.

// writeLargeMesh writes this dataplane plus `services` other dataplanes (one service each)
// split over `files` files, and a VirtualOutbound.
func writeLargeMesh(b *testing.B, services, files int) (dpFile, policies string) {
	b.Helper()
	root := b.TempDir()
	dpFile = filepath.Join(root, "dataplane.yaml")
	policies = filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(dpFile, []byte(e2eDataplane), 0o644); err != nil {
		b.Fatal(err)
	}
	per := (services + files - 1) / files
	for f := 0; f < files; f++ {
		var sb strings.Builder
		for i := f * per; i < min((f+1)*per, services); i++ {
			fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: svc%d-1\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: svc%d\n        version: v1\n---\n",
				i, 1+i/62500, (i/250)%250, i%250+1, i)
		}
		if err := os.WriteFile(filepath.Join(policies, fmt.Sprintf("dataplanes-%03d.yaml", f)), []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dpFile, policies
}

// startToReady runs the agent once and returns the time from exec to its ready file, and
// the startup time it reports itself.
func startToReady(b *testing.B, bin, dpFile, policies, work string) (wall, self float64) {
	b.Helper()
	ready := filepath.Join(work, "ready.json")
	os.Remove(ready)
	cmd := exec.Command(bin, "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", "127.0.0.1:9", "--envoy=false", "--work-dir", work, "--ready-file", ready,
		"--drain-time", "0s", "--log-level", "error")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		// A graceful stop, so the decode cache and VIP state are written as in real use.
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	var info readyInfo
	for {
		if raw, err := os.ReadFile(ready); err == nil && json.Unmarshal(raw, &info) == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			b.Fatal("not ready in 20s")
		}
		time.Sleep(500 * time.Microsecond)
	}
	wall = float64(time.Since(start).Microseconds()) / 1000
	if d, err := time.ParseDuration(info.Startup); err == nil {
		self = float64(d.Microseconds()) / 1000
	}
	return wall, self
}

// BenchmarkRunColdStart10k: an empty work dir each time (first start of a pod or VM).
// BenchmarkRunWarmStart10k: the work dir of a previous run (restart): VIP state and decode
// cache in place, the inventory unchanged.
func BenchmarkRunColdStart10k(b *testing.B) { benchmarkStart(b, false) }
func BenchmarkRunWarmStart10k(b *testing.B) { benchmarkStart(b, true) }

func benchmarkStart(b *testing.B, warm bool) {
	for _, files := range []int{1, 100} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			bin := kumaDP(b)
			dpFile, policies := writeLargeMesh(b, 10000, files)
			work := b.TempDir()
			if warm {
				startToReady(b, bin, dpFile, policies, work) // fills the work dir
				time.Sleep(200 * time.Millisecond)           // the cache is written after start
			}
			var walls, selfs []float64
			for i := 0; i < b.N; i++ {
				if !warm {
					work = b.TempDir()
				}
				wall, self := startToReady(b, bin, dpFile, policies, work)
				walls, selfs = append(walls, wall), append(selfs, self)
			}
			b.ReportMetric(median(walls), "ms-to-ready")
			b.ReportMetric(median(selfs), "ms-self-reported")
		})
	}
}

func BenchmarkRunPolicyChangeToDNS10k(b *testing.B) {
	bin := kumaDP(b)
	dpFile, policies := writeLargeMesh(b, 10000, 1)
	work := b.TempDir()
	ready := filepath.Join(work, "ready.json")
	cmd := exec.Command(bin, "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", "127.0.0.1:9", "--envoy=false", "--work-dir", work, "--ready-file", ready,
		"--drain-time", "0s", "--log-level", "error")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var info readyInfo
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if raw, err := os.ReadFile(ready); err == nil && json.Unmarshal(raw, &info) == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			b.Fatal("not ready in 20s")
		}
	}
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	var took []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		host := fmt.Sprintf("edit%d.svc42.mesh.", i)
		policy := fmt.Sprintf(editPolicy, i)
		tmp := filepath.Join(policies, ".edit.tmp")
		if err := os.WriteFile(tmp, []byte(policy), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(policies, "edit.yaml")); err != nil {
			b.Fatal(err)
		}
		for {
			m := new(dns.Msg)
			m.SetQuestion(host, dns.TypeA)
			if r, _, err := c.Exchange(m, info.DNSUDP[0]); err == nil && len(r.Answer) > 0 {
				break
			}
			if time.Since(start) > 5*time.Second {
				b.Fatalf("%s not answering 5s after the edit", host)
			}
		}
		took = append(took, float64(time.Since(start).Microseconds())/1000)
	}
	b.ReportMetric(median(took), "ms-to-answer")
}

const editPolicy = `type: VirtualOutbound
mesh: default
name: edit
selectors:
  - match:
      kuma.io/service: svc42
conf:
  host: "edit%d.{{service}}.mesh"
  port: 8080
  tags:
    kuma.io/service: service
`

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
