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
