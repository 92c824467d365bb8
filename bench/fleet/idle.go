package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/bench/internal/procstat"
)

// The --idle measurement: what one connected, synced and then idle agent costs the control
// plane. For each size N a fresh kuma-cp (one replica, --metrics-pprof) serves a small mesh;
// it is measured once started and again with N agents connected, synced and silent, each
// time after a collection (the heap profile's gc=1), so the difference over N is the
// agents' own: resident memory, the heap in use, goroutine stacks and goroutines per agent,
// and the CPU the idle agents cost (the keepalive's pings, mostly) over idleWindow.

// idleWindow is how long the connected agents are watched idle for their CPU.
const idleWindow = 10 * time.Second

type idleSample struct {
	rss, heap, stack, goroutines int64
}

type idleResult struct {
	before, after idleSample
	idleCPU       time.Duration // over idleWindow, agents connected and silent
}

func runIdle(sizes []int, dpSize int, kumaCP, baseline, self, tmp string, opt options) error {
	dir := filepath.Join(tmp, fmt.Sprintf("mesh-%d", dpSize))
	if err := writeMesh(dir, dpSize); err != nil {
		return err
	}
	builds := buildsOf(kumaCP, baseline)
	fmt.Printf("idle agents: cost per connected, synced, silent agent; kuma-cp pinned to CPU 0 (%d dataplanes), agents to CPU 1, TLS: %v, kuma-cp serve %s, load %s\n",
		dpSize, opt.tls, strings.Join(opt.cpFlags, " "), procstat.LoadAvg())
	fmt.Printf("%-9s %-7s %8s %9s %9s %11s %10s %10s %10s %10s %11s  %s\n", "BUILD", "AGENTS", "RSS-MIB", "HEAP-MIB", "STACK-MIB",
		"GOROUTINES", "RSS-KIB/A", "HEAP-KIB/A", "STACK-KIB/A", "GOROUT/A", "IDLE-CPU-%", "LOAD-AFTER")
	for _, n := range sizes {
		for _, b := range builds {
			res, err := idle(b.bin, self, dir, tmp, b.name, n, opt)
			if err != nil {
				return fmt.Errorf("%s: %d idle agents: %w", b.name, n, err)
			}
			a := res.after
			per := func(after, before int64) float64 {
				if n == 0 {
					return 0
				}
				return float64(after-before) / float64(n) / 1024
			}
			gper := 0.0
			if n > 0 {
				gper = float64(a.goroutines-res.before.goroutines) / float64(n)
			}
			fmt.Printf("%-9s %-7d %8.1f %9.1f %9.1f %11d %10.1f %10.1f %10.1f %10.2f %11.1f  %s\n", b.name, n,
				float64(a.rss)/(1<<20), float64(a.heap)/(1<<20), float64(a.stack)/(1<<20), a.goroutines,
				per(a.rss, res.before.rss), per(a.heap, res.before.heap), per(a.stack, res.before.stack), gper,
				100*res.idleCPU.Seconds()/idleWindow.Seconds(), procstat.LoadAvg())
		}
	}
	return nil
}

func idle(kumaCP, self, dir, tmp, build string, agents int, opt options) (idleResult, error) {
	r, err := startReplica(kumaCP, dir, tmp, 0, append([]string{"--metrics-pprof"}, opt.cpFlags...))
	if err != nil {
		return idleResult{}, err
	}
	defer r.stop()
	var res idleResult
	time.Sleep(time.Second)
	if res.before, err = r.sample(); err != nil || agents == 0 {
		res.after = res.before
		return res, err
	}
	cmd := agentsCmd(self, agents, r.address, opt)
	cmd.Stderr = os.Stderr
	hold, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() { hold.Close(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(stdout).ReadBytes('\n'); err != nil {
		return res, fmt.Errorf("agents: %w", err)
	}
	time.Sleep(3 * time.Second) // the last ACKs read, the first syncs' buffers let go
	cpu0 := procstat.CPUTime(r.cmd.Process.Pid)
	time.Sleep(idleWindow)
	res.idleCPU = procstat.CPUTime(r.cmd.Process.Pid) - cpu0
	if res.after, err = r.sample(); err != nil {
		return res, err
	}
	if opt.profiles != "" {
		err = r.saveProfiles(filepath.Join(opt.profiles, fmt.Sprintf("%s-%d", build, agents)))
	}
	return res, err
}

// sample collects kuma-cp's garbage (through its heap profile, gc=1; twice, so that what
// the runtime's pools held at the first is let go at the second), then reads its
// resident memory and, from /metrics, its heap in use, goroutine stacks and goroutines.
func (r *replica) sample() (idleSample, error) {
	for range 2 {
		if err := r.get("/debug/pprof/heap?gc=1", io.Discard); err != nil {
			return idleSample{}, fmt.Errorf("kuma-cp --metrics-pprof: %w", err)
		}
	}
	var metrics strings.Builder
	if err := r.get("/metrics", &metrics); err != nil {
		return idleSample{}, err
	}
	s := idleSample{rss: procstat.ReadMemory(r.cmd.Process.Pid).RSS}
	for _, line := range strings.Split(metrics.String(), "\n") {
		name, v, ok := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			s.heap = int64(f)
		case "go_memstats_stack_inuse_bytes":
			s.stack = int64(f)
		case "go_goroutines":
			s.goroutines = int64(f)
		}
	}
	if s.goroutines == 0 {
		return s, fmt.Errorf("no go_goroutines in kuma-cp's /metrics")
	}
	return s, nil
}

// saveProfiles writes kuma-cp's goroutines (grouped by stack, as text) and heap profile
// under prefix.
func (r *replica) saveProfiles(prefix string) error {
	for path, suffix := range map[string]string{"/debug/pprof/goroutine?debug=1": "-goroutines.txt", "/debug/pprof/heap": "-heap.pb.gz"} {
		f, err := os.Create(prefix + suffix)
		if err != nil {
			return err
		}
		err = r.get(path, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *replica) get(path string, w io.Writer) error {
	resp, err := http.Get("http://" + r.health + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
