package fanout

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// FirstSyncBudget bounds the bytes of first syncs (a kind's full answer to an agent that
// holds nothing) in flight at once, over every stream: a fleet reconnecting after a restart
// is served in arrival order, each agent at full speed, instead of every agent sharing the
// link at once and all finishing last (and the sockets holding every answer at once).
const FirstSyncBudget = 64 << 20

// firstSyncs is the FIFO queue of first syncs; a response holds its share until the agent
// ACKs or NACKs it, or its stream ends.
type firstSyncs struct {
	budget  int64
	sem     *semaphore.Weighted
	waiting atomic.Int64 // streams queued now (metrics)
}

func newFirstSyncs(budget int64) *firstSyncs {
	return &firstSyncs{budget: budget, sem: semaphore.NewWeighted(budget)}
}

// acquire waits for room for n bytes (a body larger than the budget takes all of it) and
// returns the weight held, or ctx's error when the stream ends first.
func (q *firstSyncs) acquire(ctx context.Context, n int) (int64, error) {
	w := min(int64(n), q.budget)
	if w == 0 {
		return 0, nil
	}
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	if err := q.sem.Acquire(ctx, w); err != nil {
		return 0, err
	}
	return w, nil
}

func (q *firstSyncs) release(w int64) {
	if w > 0 {
		q.sem.Release(w)
	}
}
