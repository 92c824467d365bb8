package mesh

import "time"

// Test-only helpers over the package's API.

// BestMatch returns the best-ranked selector of sels that matches tags, and whether any did.
func BestMatch(sels []Selector, tags Tags, created time.Time, name string) (Rank, bool) {
	var best Rank
	found := false
	for _, s := range sels {
		if !s.Matches(tags) {
			continue
		}
		r := RankOf(s.Match, created, name)
		if !found || r.Better(best) {
			best, found = r, true
		}
	}
	return best, found
}
