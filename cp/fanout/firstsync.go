package fanout

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// FirstSyncBudget bounds the bytes of first syncs (a kind's full answer to an agent that
// holds nothing) in flight at once, over every stream: a fleet reconnecting after a restart
// is served in arrival order, each agent at full speed, instead of every agent sharing the
// link at once and all finishing last (and the sockets holding every answer at once).
const FirstSyncBudget = 64 << 20

// FirstSyncHold is the longest a first sync holds its share of the budget: an agent's ACK
// comes after it has decoded the mesh, which is the agent's time, not the link's, so a
// slow agent does not hold back the others past this.
const FirstSyncHold = time.Second

// firstSyncs is the FIFO queue of first syncs; a response holds its share until the agent
// ACKs or NACKs it, its stream ends or FirstSyncHold has passed.
type firstSyncs struct {
	hold    atomic.Int64 // a time.Duration
	budget  int64
	sem     *semaphore.Weighted
	waiting atomic.Int64 // streams queued now (metrics)
}

func newFirstSyncs(budget int64) *firstSyncs {
	q := &firstSyncs{budget: budget, sem: semaphore.NewWeighted(budget)}
	q.hold.Store(int64(FirstSyncHold))
	return q
}

// turn is a first sync's share of the budget, given back once (ACK, stream end or hold).
type turn struct {
	once sync.Once
	q    *firstSyncs
	w    int64
}

// acquire waits for room for n bytes (a body larger than the budget takes all of it) and
// returns the turn held, or ctx's error when the stream ends first.
func (q *firstSyncs) acquire(ctx context.Context, n int) (*turn, error) {
	w := min(int64(n), q.budget)
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	if err := q.sem.Acquire(ctx, w); err != nil {
		return nil, err
	}
	t := &turn{q: q, w: w}
	time.AfterFunc(time.Duration(q.hold.Load()), t.release) // after an ACK it does nothing
	return t, nil
}

// release gives the turn's share back; nil and repeated calls do nothing.
func (t *turn) release() {
	if t == nil {
		return
	}
	t.once.Do(func() { t.q.sem.Release(t.w) })
}
