package mesh

import "time"

// Matches reports whether every tag of the selector is present in tags with an equal value,
// or with any value when the selector says "*". An empty selector matches nothing.
func (s Selector) Matches(tags Tags) bool {
	return s.Match.Matches(tags)
}

// Rank orders matches as the L4 TrafficRoute design decides: more tags beat fewer, then more exact values
// (an exact value beats "*"), then the newest creation time, then the name (lower first),
// so that the order is total and deterministic.
type Rank struct {
	Tags    int
	Exact   int
	Created time.Time
	Name    string
}

// RankOf is the rank of a selector owned by a resource created at created and named name.
func RankOf(sel Tags, created time.Time, name string) Rank {
	r := Rank{Tags: len(sel), Created: created, Name: name}
	for _, tg := range sel {
		if tg.Value != Wildcard {
			r.Exact++
		}
	}
	return r
}

// Better reports whether r wins over o.
func (r Rank) Better(o Rank) bool {
	if r.Tags != o.Tags {
		return r.Tags > o.Tags
	}
	if r.Exact != o.Exact {
		return r.Exact > o.Exact
	}
	if !r.Created.Equal(o.Created) {
		return r.Created.After(o.Created)
	}
	return r.Name < o.Name
}
