package store

// Joined is how many callers wait for the list under way of a SharedLists store.
func Joined(s Store) int { return s.(*sharedLists).joined() }
