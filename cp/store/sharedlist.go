package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// SharedLists is st whose lists of the whole store (every mesh and type, one page) are
// shared by the callers that overlap: a caller asking while another's list is under way gets
// that list (consistent at its revision: a caller that watches from it misses no change)
// instead of reading the store once more. A replica's followers of the store - the agents'
// feed, the routers' zones, the routers' status - start together and each lists everything:
// one read of the store and one copy of its documents in memory, not one per follower.
//
// The items are shared: a caller must not modify them. What the callers compute of an item
// (its document decoded) is computed once for all of them too: Shared. So is what they
// compute of a change their watches deliver (each caller watches on its own, from the
// list's revision). A joined list may be
// older than the call, so a reader that must see its own writes (the API) does not use it.
// Every other call goes to st.
func SharedLists(st Store) Store { return &sharedLists{Store: st} }

type sharedLists struct {
	Store
	mu  sync.Mutex
	cur *sharedList // the list under way

	watches atomic.Int32 // watches open (Watch)
	changes changeValues
}

// sharedList is one list of the whole store and the callers waiting for it.
type sharedList struct {
	done    chan struct{}
	items   []Item
	next    string
	rev     int64
	err     error
	ended   bool // the first caller's context ended: its error is not the others'
	waiting int  // callers joined and still waiting (guarded by sharedLists.mu)
}

// List implements Store.
func (s *sharedLists) List(ctx context.Context, mesh, typ, after string, limit int) ([]Item, string, int64, error) {
	if mesh != "" || typ != "" || after != "" || limit != 0 {
		return s.Store.List(ctx, mesh, typ, after, limit)
	}
	s.mu.Lock()
	if l := s.cur; l != nil {
		return s.join(ctx, l)
	}
	l := &sharedList{done: make(chan struct{})}
	s.cur = l
	s.mu.Unlock()
	l.items, l.next, l.rev, l.err = s.Store.List(ctx, "", "", "", 0)
	l.ended = ctx.Err() != nil
	s.mu.Lock()
	s.cur = nil
	readers := 1 + l.waiting
	s.mu.Unlock()
	if l.err == nil && readers > 1 {
		share(l.items, readers)
	}
	close(l.done)
	return l.items, l.next, l.rev, l.err
}

// join waits for l, the list under way (s.mu held, released here), and takes it.
func (s *sharedLists) join(ctx context.Context, l *sharedList) ([]Item, string, int64, error) {
	l.waiting++
	s.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		s.mu.Lock()
		if s.cur == l { // not counted among the list's readers
			l.waiting--
			s.mu.Unlock()
			return nil, "", 0, ctx.Err()
		}
		s.mu.Unlock()
		<-l.done // counted: it takes the list
	}
	if l.err != nil && l.ended {
		return s.Store.List(ctx, "", "", "", 0)
	}
	return l.items, l.next, l.rev, l.err
}

// ListUnderWay is the list of the whole store another caller of st's List has under way
// (SharedLists), joined as List joins it; ok is false when there is none (or st shares no
// lists): a reader that needs part of the store reads that part itself, unless the whole is
// being read anyway.
func ListUnderWay(ctx context.Context, st Store) (items []Item, rev int64, ok bool, err error) {
	s, shared := st.(*sharedLists)
	if !shared {
		return nil, 0, false, nil
	}
	s.mu.Lock()
	l := s.cur
	if l == nil {
		s.mu.Unlock()
		return nil, 0, false, nil
	}
	items, _, rev, err = s.join(ctx, l)
	return items, rev, true, err
}

// LastDelete is the wrapped store's (Etcd.LastDelete), 0 when it cannot tell: the wrapper
// hides no reader's use of it (the feed's content revision).
func (s *sharedLists) LastDelete(ctx context.Context, rev int64) (int64, error) {
	if ld, ok := s.Store.(interface {
		LastDelete(ctx context.Context, rev int64) (int64, error)
	}); ok {
		return ld.LastDelete(ctx, rev)
	}
	return 0, nil
}

// Watch implements Store: st's watch, whose changes written carry a value shared with the
// store's other watches delivering the same change (Shared): the followers of the store each
// watch it, and decode a change once between them.
func (s *sharedLists) Watch(ctx context.Context, from int64) <-chan Event {
	in := s.Store.Watch(ctx, from)
	out := make(chan Event, cap(in)) // what is queued shows as queued (the feed takes a burst together)
	s.watches.Add(1)
	go func() {
		defer close(out)
		defer s.watches.Add(-1)
		for e := range in {
			if e.Type == Put {
				e.Item.shared = s.changes.value(e.Item.Key, e.Item.Version, s.watches.Load(), len(e.Item.Doc))
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// changeValues are the shared values of the latest changes delivered (Watch), by key and
// version: the first watch to deliver a change makes its value, for as many readers as
// watches are open; the others find it. Values are dropped as their readers take them; the
// table itself keeps the newest changes' only (maxChanges, and their documents within
// maxChangeBytes), so a reader that never takes a change (its watch started after it) holds
// nothing for long.
type changeValues struct {
	mu    sync.Mutex
	m     map[changeKey]*sharedValue
	order []changeKey // oldest first
	sizes []int       // the documents' sizes, as order
	bytes int
}

type changeKey struct {
	Key
	version int64
}

const (
	maxChanges     = 1024
	maxChangeBytes = 4 << 20
)

func (c *changeValues) value(k Key, version int64, readers int32, size int) *sharedValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	ck := changeKey{k, version}
	if v := c.m[ck]; v != nil {
		return v
	}
	if c.m == nil {
		c.m = map[changeKey]*sharedValue{}
	}
	v := &sharedValue{}
	v.left.Store(readers)
	c.m[ck] = v
	c.order, c.sizes, c.bytes = append(c.order, ck), append(c.sizes, size), c.bytes+size
	for len(c.order) > maxChanges || c.bytes > maxChangeBytes && len(c.order) > 1 {
		delete(c.m, c.order[0])
		c.bytes -= c.sizes[0]
		c.order, c.sizes = c.order[1:], c.sizes[1:]
	}
	return v
}
