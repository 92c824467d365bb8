package api

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
)

// GET /events: Server-Sent Events telling a page that what it shows may have changed. One
// `change` event (its data the store revision) follows each change the store's watch
// delivers and each change of the agents connected (looked at every AgentsEvery). A burst
// coalesces into one event per subscriber. The store is watched once for every subscriber,
// and only while there is one.

// events is the subscribers of GET /events and the watch that serves them.
type events struct {
	mu     sync.Mutex
	subs   map[chan int64]struct{}
	cancel context.CancelFunc
	once   sync.Once
	closed chan struct{} // closed by CloseEvents
}

func (e *events) done() chan struct{} {
	e.once.Do(func() { e.closed = make(chan struct{}) })
	return e.closed
}

// CloseEvents ends every GET /events stream, now and later: an HTTP server's Shutdown waits
// for its connections to go idle, and a stream never does (register it with the server's
// RegisterOnShutdown).
func (s *Server) CloseEvents() {
	done := s.events.done()
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	select {
	case <-done:
	default:
		close(done)
	}
}

// subscribe adds a subscriber (the watch starts with the first); the returned func removes
// it (the watch stops with the last).
func (s *Server) subscribe() (<-chan int64, func()) {
	e := &s.events
	ch := make(chan int64, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.subs == nil {
		e.subs = map[chan int64]struct{}{}
	}
	e.subs[ch] = struct{}{}
	if len(e.subs) == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		go s.followStore(ctx)
		go s.followAgents(ctx)
	}
	return ch, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.subs, ch)
		if len(e.subs) == 0 && e.cancel != nil {
			e.cancel()
			e.cancel = nil
		}
	}
}

// notify tells every subscriber; one that has not read the last event keeps it (the newest
// revision replaces it).
func (s *Server) notify(rev int64) {
	e := &s.events
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case <-ch:
		default:
		}
		ch <- rev
	}
}

// followStore watches the store from its revision now, listing again when the watch ends
// (compacted away, the store unreachable), until ctx ends.
func (s *Server) followStore(ctx context.Context) {
	for ctx.Err() == nil {
		_, _, rev, err := s.Store.List(ctx, "", "", "", 1)
		if err == nil {
			for ev := range s.Store.Watch(ctx, rev) {
				if ev.Type == store.Relist {
					break
				}
				s.notify(ev.Revision)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// followAgents notifies when the agents connected (or their replicas) change.
func (s *Server) followAgents(ctx context.Context) {
	if s.Agents == nil {
		return
	}
	every := s.AgentsEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	fingerprint := func() uint64 {
		h := fnv.New64a()
		for _, a := range s.Agents() {
			fmt.Fprintln(h, a.Mesh, a.Name, a.Replicas)
		}
		return h.Sum64()
	}
	last := fingerprint()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f := fingerprint(); f != last {
				last = f
				s.notify(0)
			}
		}
	}
}

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		fail(w, http.StatusInternalServerError, "no streaming", "this connection cannot stream events")
		return
	}
	closed := s.events.done()
	ch, unsubscribe := s.subscribe()
	defer unsubscribe()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, "retry: 1000\n: subscribed\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-closed:
			return
		case rev := <-ch:
			fmt.Fprintf(w, "event: change\ndata: %d\n\n", rev)
		case <-keep.C:
			fmt.Fprint(w, ": keepalive\n\n")
		}
		fl.Flush()
	}
}
