package store

// JoinedCount is how many callers wait for the list under way of a SharedLists store.
func JoinedCount(s Store) int { return s.(*sharedLists).joined() }

// Watches is how many watches of a SharedLists store are open.
func Watches(s Store) int { return int(s.(*sharedLists).watches.Load()) }

// joined is how many callers wait for the list under way (0 when none is), for tests.
func (s *sharedLists) joined() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.waiting
}

// Gated is st behind a gatedStore (sharedlist_test.go), for the package's external tests:
// lists counts the lists that reach st, and open lets them through.
func Gated(st Store) (gated Store, lists func() int32, open func()) {
	g := &gatedStore{Store: st, gate: make(chan struct{})}
	return g, g.lists.Load, func() { close(g.gate) }
}
