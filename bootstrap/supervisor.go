package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Supervisor runs Envoy: started with the bootstrap, restarted with exponential backoff and
// jitter when it exits on its own, drained and stopped on shutdown. Set the fields, then call
// Run once.
type Supervisor struct {
	Binary     string // from FindEnvoy
	ConfigPath string // the bootstrap written by Write
	// DrainTime is Envoy's --drain-time-s and how long Drain waits (default 5s).
	DrainTime time.Duration
	LogLevel  string // --log-level (default "info")
	// AdminSocket or AdminAddress (loopback ip:port): where Drain reaches the admin API.
	AdminSocket, AdminAddress string
	ExtraArgs                 []string
	// InitialBackoff (default 1s) doubles after each crash up to MaxBackoff (default 30s),
	// with up to Jitter (default 0.2, negative for none) of it added at random. A run that
	// lasted longer than MaxBackoff resets it.
	InitialBackoff, MaxBackoff time.Duration
	Jitter                     float64
	// StopGrace is how long Envoy gets after SIGTERM before SIGKILL (default 10s).
	StopGrace time.Duration
	// Stdout and Stderr receive Envoy's output (default: this process's).
	Stdout, Stderr io.Writer
	Log            *slog.Logger

	live     atomic.Bool
	restarts atomic.Int64
	mu       sync.Mutex
	pid      int
}

// Args are Envoy's command-line arguments.
func (s *Supervisor) Args() []string {
	drain := s.DrainTime
	if drain <= 0 {
		drain = 5 * time.Second
	}
	level := s.LogLevel
	if level == "" {
		level = "info"
	}
	args := []string{
		"--config-path", s.ConfigPath,
		"--drain-time-s", strconv.Itoa(int((drain + time.Second - 1) / time.Second)),
		"--drain-strategy", "immediate",
		"--disable-hot-restart",
		"--log-level", level,
	}
	return append(args, s.ExtraArgs...)
}

// Live reports whether Envoy is running (false while it is down between restarts).
func (s *Supervisor) Live() bool { return s.live.Load() }

// Restarts is how many times Envoy was restarted after exiting on its own.
func (s *Supervisor) Restarts() int { return int(s.restarts.Load()) }

// PID is the running Envoy's process id, 0 when none.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

func (s *Supervisor) logger() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Run starts Envoy and keeps it running until ctx is cancelled, then stops it (SIGTERM to its
// process group, SIGKILL after StopGrace). It returns nil after a requested stop and an error
// only when Envoy cannot be started at all.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.Binary == "" || s.ConfigPath == "" {
		return errors.New("envoy: supervisor needs Binary and ConfigPath")
	}
	initial, maxB := s.InitialBackoff, s.MaxBackoff
	if initial <= 0 {
		initial = time.Second
	}
	if maxB <= 0 {
		maxB = 30 * time.Second
	}
	jitter := s.Jitter
	if jitter == 0 {
		jitter = 0.2
	}
	log := s.logger()
	backoff := initial
	for {
		cmd, exited, err := s.start()
		if err != nil {
			return err
		}
		started := time.Now()
		log.Info("envoy started", "pid", cmd.Process.Pid, "args", s.Args())
		select {
		case <-ctx.Done():
			s.stop(cmd, exited)
			return nil
		case err := <-exited:
			s.setDown()
			ran := time.Since(started)
			if ran > maxB {
				backoff = initial
			}
			wait := backoff
			if jitter > 0 {
				wait += time.Duration(rand.Float64() * jitter * float64(backoff))
			}
			log.Error("envoy exited; restarting", "error", exitError(err), "ran", ran.Round(time.Millisecond), "restart_in", wait.Round(time.Millisecond))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, maxB)
			s.restarts.Add(1)
		}
	}
}

func exitError(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (s *Supervisor) start() (*exec.Cmd, <-chan error, error) {
	cmd := exec.Command(s.Binary, s.Args()...)
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	// Output to a writer that is not a file goes through pipes: once Envoy has exited, a
	// child it left holding them must not hide the exit (Wait would wait for it).
	cmd.WaitDelay = time.Second
	// Its own process group, so a stop reaches Envoy's children too; and killed with us
	// if kuma-dp dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("envoy: starting %s: %w", s.Binary, err)
	}
	s.mu.Lock()
	s.pid = cmd.Process.Pid
	s.mu.Unlock()
	s.live.Store(true)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, exited, nil
}

func (s *Supervisor) setDown() {
	s.live.Store(false)
	s.mu.Lock()
	s.pid = 0
	s.mu.Unlock()
}

// stop: SIGTERM to the process group, SIGKILL after the grace period.
func (s *Supervisor) stop(cmd *exec.Cmd, exited <-chan error) {
	grace := s.StopGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		s.logger().Info("envoy stopped")
	case <-t.C:
		s.logger().Warn("envoy ignored SIGTERM; killing it", "grace", grace)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	s.setDown()
}

// Drain makes Envoy fail its health checks (POST /healthcheck/fail on the admin API) so
// load balancers and peers stop sending new connections, then waits the drain time (or until
// ctx ends) for the open ones to finish.
func (s *Supervisor) Drain(ctx context.Context) error {
	client := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + s.AdminAddress + "/healthcheck/fail"
	if s.AdminAddress == "" {
		if s.AdminSocket == "" {
			return errors.New("envoy: drain: no admin socket or address")
		}
		sock := s.AdminSocket
		client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		url = "http://envoy-admin/healthcheck/fail"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("envoy: drain: admin API: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envoy: drain: admin API answered %s", resp.Status)
	}
	drain := s.DrainTime
	if drain <= 0 {
		drain = 5 * time.Second
	}
	s.logger().Info("envoy draining", "drain_time", drain)
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
