package agent

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// RunWithSignals runs the agent until SIGTERM or SIGINT: the first starts the graceful
// shutdown (drain), a second stops at once. SIGHUP forces a reload. ctx cancels like a
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
				stopping = true
				a.log.Info("signal received: graceful shutdown", "signal", s.String())
				cancel()
			default:
				a.log.Warn("second signal: stopping now", "signal", s.String())
				a.Abort()
			}
		}
	}
}
