package errtext

import "strings"

// Suggest returns the known name closest to key, if close enough to be a likely typo (the
// "did you mean" of every error about an unknown name: resource fields, kinds, config keys),
// or "".
func Suggest(key string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		if dist := editDistance(strings.ToLower(key), strings.ToLower(k)); dist < bestD {
			best, bestD = k, dist
		}
	}
	limit := 2
	if l := len(key) / 3; l > limit {
		limit = l
	}
	if bestD <= limit && bestD < len(key) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
