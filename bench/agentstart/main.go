// Command agentstart measures the speed promises of `kuma-dp run` on the real binary, with
// a 10,000-service mesh (make bench-system runs it):
//
//	go run ./bench/agentstart [--runs 5] [--services 10000]
//
// to-ready is from exec to the ready file (model loaded, VIPs allocated, DNS answering),
// self-reported the agent's own figure from its start to ready, cpu the agent's user+system
// CPU time over the whole run (start, ready, graceful stop); cold is an empty work dir each
// time (the first start of a pod or VM), warm the work dir of a previous run (a restart: VIP
// state and decode cache in place). to-answer is from a policy file written to the new name
// answering over UDP. Each figure is the median of the runs, with min and max, and the load
// average at the start.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/spf13/pflag"
)

const dataplane = `type: Dataplane
mesh: default
name: web-1
networking:
  address: 10.0.0.1
  inbound:
    - port: 8080
      tags:
        kuma.io/service: web
`

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

type readyInfo struct {
	DNSUDP  []string `json:"dnsUDP"`
	Startup string   `json:"startup"`
}

func main() {
	runs := pflag.Int("runs", 5, "runs of each measurement (the median is reported)")
	services := pflag.Int("services", 10000, "services in the mesh, one dataplane each")
	pflag.Parse()
	if err := run(*runs, *services); err != nil {
		fmt.Fprintln(os.Stderr, "agentstart:", err)
		os.Exit(1)
	}
}

func run(runs, services int) error {
	tmp, err := os.MkdirTemp("", "kdp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "kuma-dp")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/kuma-dp").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/kuma-dp (run from the repository's root): %v\n%s", err, out)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("kuma-dp run, %d services, %d runs each; load average at start: %s\n", services, runs, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Printf("%-24s %26s %26s %26s\n", "", "to-ready ms", "self-reported ms", "cpu ms")
	for _, files := range []int{1, 100} {
		dpFile, policies, err := writeLargeMesh(filepath.Join(tmp, fmt.Sprintf("mesh-%d", files)), services, files)
		if err != nil {
			return err
		}
		for _, warm := range []bool{false, true} {
			work := filepath.Join(tmp, fmt.Sprintf("work-%d-%v", files, warm))
			if warm {
				if _, err := startToReady(bin, dpFile, policies, work); err != nil { // fills the work dir
					return err
				}
			}
			var wall, self, cpu []float64
			for i := 0; i < runs; i++ {
				if !warm {
					work = filepath.Join(tmp, fmt.Sprintf("cold-%d-%d", files, i))
				}
				m, err := startToReady(bin, dpFile, policies, work)
				if err != nil {
					return err
				}
				wall, self, cpu = append(wall, m.wall), append(self, m.self), append(cpu, m.cpu)
			}
			name := map[bool]string{false: "cold", true: "warm"}[warm]
			fmt.Printf("%-24s %26s %26s %26s\n", fmt.Sprintf("%s start, files=%d", name, files), spread(wall), spread(self), spread(cpu))
		}
	}
	dpFile, policies, err := writeLargeMesh(filepath.Join(tmp, "mesh-edit"), services, 1)
	if err != nil {
		return err
	}
	took, err := policyChangeToDNS(bin, dpFile, policies, filepath.Join(tmp, "work-edit"), runs)
	if err != nil {
		return err
	}
	fmt.Printf("%-24s %26s (to-answer ms)\n", "policy edit to DNS", spread(took))
	return nil
}

// writeLargeMesh writes this dataplane plus `services` other dataplanes (one service each)
// split over `files` files.
func writeLargeMesh(root string, services, files int) (dpFile, policies string, err error) {
	dpFile = filepath.Join(root, "dataplane.yaml")
	policies = filepath.Join(root, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(dpFile, []byte(dataplane), 0o644); err != nil {
		return "", "", err
	}
	per := (services + files - 1) / files
	for f := 0; f < files; f++ {
		var sb strings.Builder
		for i := f * per; i < min((f+1)*per, services); i++ {
			fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: svc%d-1\nnetworking:\n  address: 10.%d.%d.%d\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: svc%d\n        version: v1\n---\n",
				i, 1+i/62500, (i/250)%250, i%250+1, i)
		}
		if err := os.WriteFile(filepath.Join(policies, fmt.Sprintf("dataplanes-%03d.yaml", f)), []byte(sb.String()), 0o644); err != nil {
			return "", "", err
		}
	}
	return dpFile, policies, nil
}

func agentCmd(bin, dpFile, policies, work string) *exec.Cmd {
	return exec.Command(bin, "run", "--dataplane-file", dpFile, "--policies-dir", policies,
		"--dns-address", "127.0.0.1", "--dns-proxy-port", "0", "--admin-address", "127.0.0.1:0",
		"--dns-upstream", "127.0.0.1:9", "--envoy=false", "--work-dir", work, "--ready-file", filepath.Join(work, "ready.json"),
		"--drain-time", "0s", "--log-level", "error")
}

// waitReady waits for the agent's ready file.
func waitReady(work string, start time.Time) (readyInfo, error) {
	var info readyInfo
	for {
		if raw, err := os.ReadFile(filepath.Join(work, "ready.json")); err == nil && json.Unmarshal(raw, &info) == nil {
			return info, nil
		}
		if time.Since(start) > 20*time.Second {
			return info, fmt.Errorf("not ready in 20s")
		}
		time.Sleep(500 * time.Microsecond)
	}
}

type startFigures struct{ wall, self, cpu float64 }

// startToReady runs the agent once, until ready, then stops it gracefully (so the decode
// cache and VIP state are written as in real use).
func startToReady(bin, dpFile, policies, work string) (startFigures, error) {
	var m startFigures
	if err := os.MkdirAll(work, 0o755); err != nil {
		return m, err
	}
	os.Remove(filepath.Join(work, "ready.json"))
	cmd := agentCmd(bin, dpFile, policies, work)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return m, err
	}
	info, err := waitReady(work, start)
	m.wall = float64(time.Since(start).Microseconds()) / 1000
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	if err != nil {
		return m, err
	}
	if d, err := time.ParseDuration(info.Startup); err == nil {
		m.self = float64(d.Microseconds()) / 1000
	}
	if st := cmd.ProcessState; st != nil {
		m.cpu = float64((st.UserTime() + st.SystemTime()).Microseconds()) / 1000
	}
	time.Sleep(200 * time.Millisecond) // let the disk settle between runs
	return m, nil
}

// policyChangeToDNS runs one agent and times, runs times, a new VirtualOutbound written to
// its hostname answering over UDP.
func policyChangeToDNS(bin, dpFile, policies, work string, runs int) ([]float64, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	cmd := agentCmd(bin, dpFile, policies, work)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	info, err := waitReady(work, start)
	if err != nil {
		return nil, err
	}
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	var took []float64
	for i := 0; i < runs; i++ {
		host := fmt.Sprintf("edit%d.svc42.mesh.", i)
		tmp := filepath.Join(policies, ".edit.tmp")
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf(editPolicy, i)), 0o644); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(policies, "edit.yaml")); err != nil {
			return nil, err
		}
		for {
			m := new(dns.Msg)
			m.SetQuestion(host, dns.TypeA)
			if r, _, err := c.Exchange(m, info.DNSUDP[0]); err == nil && len(r.Answer) > 0 {
				break
			}
			if time.Since(start) > 5*time.Second {
				return nil, fmt.Errorf("%s not answering 5s after the edit", host)
			}
		}
		took = append(took, float64(time.Since(start).Microseconds())/1000)
	}
	return took, nil
}

// spread is "median (min-max)".
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}
