// Command rsspeak is bench/memory.sh's sampler of a process's resident memory while it
// starts and loads. The kernel keeps one peak per process (VmHWM), of its whole RSS: the
// pages of its own binary included, which every process running that binary shares and
// which initialising a large Go binary maps 64 KiB at a time. rsspeak reads
// /proc/<pid>/status every interval and reports the largest RSS and the largest anonymous
// part (RssAnon: the heap, stacks, written data - what the process holds alone) it saw,
// summed over the process and its children, until the process exits or rsspeak gets
// SIGTERM or SIGINT:
//
//	rsspeak --pid 1234 --interval 1ms > peak.txt   # "rss_kib anon_kib samples"
//
// A sample every millisecond can miss a spike shorter than that: the figures are lower
// bounds of the true peaks.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	fs := pflag.NewFlagSet("rsspeak", pflag.ContinueOnError)
	pid := fs.Int("pid", 0, "process to sample (with its children)")
	interval := fs.Duration("interval", time.Millisecond, "time between samples")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *pid <= 0 || *interval <= 0 {
		fmt.Fprintln(os.Stderr, "rsspeak: --pid must name a process and --interval be positive")
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	var maxRSS, maxAnon uint64
	samples := 0
	for {
		rss, anon, ok := sample(*pid)
		if !ok {
			break
		}
		samples++
		maxRSS, maxAnon = max(maxRSS, rss), max(maxAnon, anon)
		select {
		case <-stop:
			fmt.Println(maxRSS, maxAnon, samples)
			return
		case <-tick.C:
		}
	}
	if samples == 0 {
		fmt.Fprintf(os.Stderr, "rsspeak: no process %d\n", *pid)
		os.Exit(1)
	}
	fmt.Println(maxRSS, maxAnon, samples)
}

// sample returns VmRSS and RssAnon (KiB) of pid and its descendants; ok is false when pid
// is gone.
func sample(pid int) (rss, anon uint64, ok bool) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	rss, anon = field(status, "VmRSS:"), field(status, "RssAnon:")
	// Each thread lists the children it started.
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		children, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, c := range bytes.Fields(children) {
			if cpid, err := strconv.Atoi(string(c)); err == nil {
				r, a, _ := sample(cpid)
				rss, anon = rss+r, anon+a
			}
		}
	}
	return rss, anon, true
}

// field returns the value in KiB of a "Name:   123 kB" line of a status file (0 when absent).
func field(status []byte, name string) uint64 {
	i := bytes.Index(status, []byte("\n"+name))
	if i < 0 {
		return 0
	}
	line := status[i+1+len(name):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(string(f[0]), 10, 64)
	return v
}
