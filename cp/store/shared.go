package store

import "sync"

// sharedValue is what the readers of one shared list compute of one of its items: computed
// by the first reader to ask, dropped once every reader has taken or passed it.
type sharedValue struct {
	mu   sync.Mutex
	left int32 // readers that have neither taken nor passed it
	done bool  // computed (v holds it until left is 0)
	v    any
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
		v.left = int32(readers)
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
	if s == nil {
		return compute(it)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left <= 0 {
		return compute(it)
	}
	if !s.done {
		s.v, s.done = compute(it), true
	}
	v, ok := s.v.(T)
	if !ok { // another reader's compute: not this one's to share
		v = compute(it)
	}
	if s.left--; s.left == 0 {
		s.v = nil
	}
	return v
}

// Pass says a reader of a shared list will not take it (see Shared): its value is dropped
// once every other reader has taken it.
func Pass(it Item) {
	s := it.shared
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left > 0 {
		if s.left--; s.left == 0 {
			s.v = nil
		}
	}
}
