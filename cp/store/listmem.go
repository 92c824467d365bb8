package store

import (
	"runtime/debug"
	"sync"
	"time"
)

// ListDone says a reader is done with a list of the whole store: it dropped the documents and
// keeps only what it took from them. A second after the last such call (a replica's followers
// list the store at about the same time), the heap's free memory is returned to the system:
// the documents listed and the garbage of decoding them were several times what the replica
// keeps - its start's peak - and the runtime returns them over minutes on its own, so the
// resident memory after a start stayed near that peak.
func ListDone() { listMemory.done() }

var listMemory = &debounce{wait: time.Second, run: debug.FreeOSMemory}

// debounce runs run once wait has passed since the last call of done.
type debounce struct {
	wait time.Duration
	run  func()

	mu    sync.Mutex
	timer *time.Timer
}

func (d *debounce) done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer == nil {
		d.timer = time.AfterFunc(d.wait, d.run)
		return
	}
	d.timer.Reset(d.wait)
}
