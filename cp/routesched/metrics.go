package routesched

import (
	"sync"
	"sync/atomic"
)

// Metrics are the reconciler's counters.
type Metrics struct {
	Scheduled   atomic.Uint64 // bindings made
	Rescheduled atomic.Uint64 // bindings removed to schedule again
	Passes      atomic.Uint64
	Pending     atomic.Int64 // routes not scheduled after the last pass
	// MassUnbindSlowed counts the passes that undid a router's bindings in steps (more than
	// half of them at once).
	MassUnbindSlowed atomic.Uint64
	mu               sync.Mutex
	failures         map[string]uint64 // by reason
}

// Failures is the count of scheduling failures by reason.
func (m *Metrics) Failures() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range m.failures {
		out[k] = v
	}
	return out
}

func (m *Metrics) fail(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failures == nil {
		m.failures = map[string]uint64{}
	}
	m.failures[reason]++
}
