package agent

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// RunWithSignals runs the agent until SIGTERM or SIGINT: the first starts the graceful
// shutdown (drain), a second stops at once (not the repeats of one go run parent's death:
// parentDeathEcho). SIGHUP forces a reload. ctx cancels like a
// first signal.
func (a *Agent) RunWithSignals(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stopping := false
	var first time.Time
	for {
		select {
		case err := <-done:
			return err
		case s := <-sigs:
			switch {
			case s == syscall.SIGHUP:
				a.log.Info("SIGHUP: reloading")
				a.Reload()
			case !stopping:
				stopping, first = true, time.Now()
				a.log.Info("signal received: graceful shutdown", "signal", s.String())
				cancel()
			case parentDeathEcho(s, time.Since(first)):
				a.log.Debug("SIGTERM again from go run's exit: not a second signal")
			default:
				a.log.Warn("second signal: stopping now", "signal", s.String())
				a.Abort()
			}
		}
	}
}
