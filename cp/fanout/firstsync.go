package fanout

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// FirstSyncBudget bounds the bytes of first syncs (a kind's full answer to an agent that
// holds nothing) in flight at once, over every stream: an answer is in flight from the
// moment it is sent until its agent ACKs or NACKs it, or its stream ends. A fleet
// reconnecting after a restart is served in arrival order, each agent at full speed,
// instead of every agent sharing the link at once and all finishing last (and the sockets
// holding every answer at once).
const FirstSyncBudget = 64 << 20

// FirstSyncHold is the longest a first sync holds its share without an answer from its
// agent: one that neither ACKs nor goes away does not hold the fleet back for longer (a
// frozen agent is dropped by keepalive well before). It is far longer than the budget
// takes to cross a loaded link, so that the budget keeps bounding what is in flight when
// every transfer is slow; the ACK, not the hold, is what gives a share back.
const FirstSyncHold = 30 * time.Second

// firstSyncs is the fair queue of first syncs: turns are given in arrival order while the
// bytes in flight leave room for the next, and given back by the agent's ACK (or NACK), its
// stream's end, or FirstSyncHold. A stream waiting for a turn keeps reading its agent's
// requests, so the ACK of an answer it already sent always gives its share back.
type firstSyncs struct {
	hold    atomic.Int64 // a time.Duration
	budget  int64
	waiting atomic.Int64  // turns queued now (metrics)
	expired atomic.Uint64 // shares given back by the hold, not by the agent (metrics)

	mu    sync.Mutex
	used  int64      // bytes of the turns given and not given back
	queue *list.List // of *turn, waiting, in arrival order
}

func newFirstSyncs(budget int64) *firstSyncs {
	q := &firstSyncs{budget: budget, queue: list.New()}
	q.hold.Store(int64(FirstSyncHold))
	return q
}

// turn is one first sync's place in the queue, then its share of the budget.
type turn struct {
	q       *firstSyncs
	w       int64
	wake    func() // tells the stream waiting that its turn came
	granted atomic.Bool
	// under q.mu:
	elem     *list.Element // in the queue while waiting
	released bool
	timer    *time.Timer
}

// enqueue queues a first sync of n bytes (one larger than the budget takes all of it) and
// returns its turn, granted at once when the queue is empty and the budget has room; else
// wake is called when it is.
func (q *firstSyncs) enqueue(n int, wake func()) *turn {
	t := &turn{q: q, w: min(int64(n), q.budget), wake: wake}
	q.mu.Lock()
	t.elem = q.queue.PushBack(t)
	q.waiting.Add(1)
	woken := q.grantLocked()
	q.mu.Unlock()
	for _, g := range woken {
		if g != t {
			g.wake()
		}
	}
	return t
}

// grantLocked gives turns from the head of the queue while the budget has room for them
// and returns them.
func (q *firstSyncs) grantLocked() []*turn {
	var out []*turn
	for e := q.queue.Front(); e != nil; e = q.queue.Front() {
		t := e.Value.(*turn)
		if q.used+t.w > q.budget {
			break
		}
		q.queue.Remove(e)
		t.elem = nil
		q.waiting.Add(-1)
		q.used += t.w
		t.granted.Store(true)
		t.timer = time.AfterFunc(time.Duration(q.hold.Load()), t.expire)
		out = append(out, t)
	}
	return out
}

// expire gives back a share its agent held for the whole hold.
func (t *turn) expire() {
	if t.release() {
		t.q.expired.Add(1)
	}
}

// release leaves the queue, or gives the turn's share back and grants the next turns; nil
// and repeated calls do nothing. It reports whether it did anything.
func (t *turn) release() bool {
	if t == nil {
		return false
	}
	q := t.q
	q.mu.Lock()
	if t.released {
		q.mu.Unlock()
		return false
	}
	t.released = true
	if t.elem != nil { // still waiting: it leaves the queue (where it may have held the head)
		q.queue.Remove(t.elem)
		t.elem = nil
		q.waiting.Add(-1)
	} else {
		t.timer.Stop()
		q.used -= t.w
	}
	woken := q.grantLocked()
	q.mu.Unlock()
	for _, g := range woken {
		g.wake()
	}
	return true
}
