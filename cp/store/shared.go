package store

import (
	"sync"
	"sync/atomic"
)

// sharedValue is what the readers of one shared list compute of one of its items: computed
// by the first reader to ask, dropped once every reader has taken or passed it.
type sharedValue struct {
	left atomic.Int32 // readers that have neither taken nor passed it
	mu   sync.Mutex   // guards done and v: a reader computing it holds it
	done bool         // computed (v holds it until left is 0)
	v    any
}

// drop counts one reader done with it, and drops the value after the last.
func (s *sharedValue) drop() {
	if s.left.Add(-1) == 0 {
		s.mu.Lock()
		s.v = nil
		s.mu.Unlock()
	}
}

// sharedChunk is how many items' values are allocated together: an item a reader keeps (a
// Router) keeps its chunk, never the whole list's values.
const sharedChunk = 64

// share gives each of items a value shared by readers.
func share(items []Item, readers int) {
	var chunk []sharedValue
	for i := range items {
		if i%sharedChunk == 0 {
			chunk = make([]sharedValue, min(sharedChunk, len(items)-i))
		}
		v := &chunk[i%sharedChunk]
		v.left.Store(int32(readers))
		items[i].shared = v
	}
}

// Shared is compute(it), computed once for every reader of the shared list it came from
// (SharedLists) - by the first to ask, the others waiting for it - and dropped once each
// reader has taken it (Shared) or passed it (Pass): a replica's followers of the store decode
// each stored document once at a start, not once each, and hold each decoded only until the
// last has taken it. An item of any other read (a watch, a list with one reader) is computed
// for the caller alone, as is one asked again after every reader took it.
//
// The readers of a list pass the same compute, take or pass each item once, and do not
// modify what it returns: it is theirs together.
func Shared[T any](it Item, compute func(Item) T) T {
	s := it.shared
	if s == nil || s.left.Load() <= 0 { // every reader took it already (one asks again)
		return compute(it)
	}
	s.mu.Lock()
	if !s.done {
		s.v, s.done = compute(it), true
	}
	v, ok := s.v.(T)
	s.mu.Unlock()
	if !ok { // another reader's compute, or dropped: not this one's to share
		v = compute(it)
	}
	s.drop()
	return v
}

// Pass says a reader of a shared list will not take it (see Shared): its value is dropped
// once every other reader has taken it.
func Pass(it Item) {
	if s := it.shared; s != nil && s.left.Load() > 0 {
		s.drop() // never waits for a reader computing it
	}
}
