// Package tagset owns the representation of a set of tags (a dataplane inbound's tags, a
// selector, a destination): key/value pairs sorted by key, in one small slice.
//
// A mesh holds one tag set per inbound, and most of them hold one or two tags: as a Go map
// each costs ~340 bytes, as a slice of pairs 32 bytes a tag. A Tags is never modified once
// built, so one value may be shared (by replicas of a service, by an inbound and its
// default hostname).
//
// It never decides what a tag means, except the selector rule of Matches ("*" matches any
// value).
package tagset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kumadp/kuma-dp/internal/jsontext"
)

// Tag is one key/value pair.
type Tag struct {
	Key, Value string
}

// Tags is a set of tags sorted by key, each key once. Build one with Of, FromPairs or With
// (or decode it from JSON); a literal must be sorted by key. Its JSON is an object, as a
// map's; nil encodes as null and an empty non-nil set as {}, as a map's.
type Tags []Tag

// Wildcard is the selector value that matches any value.
const Wildcard = "*"

// linearMax is the largest set searched linearly (a few string compares beat a binary search).
const linearMax = 8

// Of returns the tags of m, sorted by key; nil for a nil map, empty for an empty one.
func Of(m map[string]string) Tags {
	if m == nil {
		return nil
	}
	t := make(Tags, 0, len(m))
	for k, v := range m {
		t = append(t, Tag{k, v})
	}
	return Sorted(t)
}

// FromPairs returns the tags k1=v1, k2=v2, ... given as FromPairs(k1, v1, k2, v2, ...); a
// later value of a key replaces an earlier one. It panics on an odd count (a programming
// error, never input).
func FromPairs(kv ...string) Tags {
	if len(kv)%2 != 0 {
		panic("tagset.FromPairs: odd number of strings")
	}
	t := make(Tags, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		t = append(t, Tag{kv[i], kv[i+1]})
	}
	return Sorted(t)
}

// Sorted returns t sorted by key with each key once (the last value of a key wins), in
// place: for sets built by appending pairs.
func Sorted(t Tags) Tags {
	slices.SortStableFunc(t, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	out := t[:0]
	for i, tg := range t {
		if i+1 < len(t) && t[i+1].Key == tg.Key {
			continue
		}
		out = append(out, tg)
	}
	return out
}

// index is the position of key k, or where it would go, and whether it is there.
func (t Tags) index(k string) (int, bool) {
	if len(t) <= linearMax {
		for i := range t {
			if c := strings.Compare(t[i].Key, k); c >= 0 {
				return i, c == 0
			}
		}
		return len(t), false
	}
	i := sort.Search(len(t), func(i int) bool { return t[i].Key >= k })
	return i, i < len(t) && t[i].Key == k
}

// Get returns the value of key k and whether t has it.
func (t Tags) Get(k string) (string, bool) {
	if i, ok := t.index(k); ok {
		return t[i].Value, true
	}
	return "", false
}

// Value returns the value of key k, "" when t lacks it.
func (t Tags) Value(k string) string {
	v, _ := t.Get(k)
	return v
}

// Has reports whether t has key k.
func (t Tags) Has(k string) bool {
	_, ok := t.index(k)
	return ok
}

// With returns a copy of t with k set to v (t is never modified).
func (t Tags) With(k, v string) Tags {
	out := make(Tags, len(t), len(t)+1)
	copy(out, t)
	return out.set(k, v)
}

// set sets k to v in t, which the caller owns.
func (t Tags) set(k, v string) Tags {
	i, ok := t.index(k)
	if ok {
		t[i].Value = v
		return t
	}
	return slices.Insert(t, i, Tag{k, v})
}

// Without returns t without key k (t itself when it lacks k).
func (t Tags) Without(k string) Tags {
	i, ok := t.index(k)
	if !ok {
		return t
	}
	out := make(Tags, 0, len(t)-1)
	return append(append(out, t[:i]...), t[i+1:]...)
}

// Equal reports whether t and o hold the same tags (nil and empty are equal, as for maps).
func (t Tags) Equal(o Tags) bool {
	return slices.Equal(t, o)
}

// Map returns the tags as a new map (nil for nil).
func (t Tags) Map() map[string]string {
	if t == nil {
		return nil
	}
	m := make(map[string]string, len(t))
	for _, tg := range t {
		m[tg.Key] = tg.Value
	}
	return m
}

// Clone returns a copy of t that shares nothing with it but the strings.
func (t Tags) Clone() Tags {
	return slices.Clone(t)
}

// Matches reports whether the selector t matches tags: every tag of t is present in tags
// with an equal value, or with any value where t says "*". An empty selector matches nothing.
func (t Tags) Matches(tags Tags) bool {
	if len(t) == 0 {
		return false
	}
	j := 0 // both are sorted: one merge walk
	for _, want := range t {
		for j < len(tags) && tags[j].Key < want.Key {
			j++
		}
		if j == len(tags) || tags[j].Key != want.Key {
			return false
		}
		if want.Value != Wildcard && want.Value != tags[j].Value {
			return false
		}
		j++
	}
	return true
}

// String is the tags as {k1=v1,k2=v2}.
func (t Tags) String() string { return string(t.AppendText(nil)) }

// AppendText appends the tags as String writes them to b.
func (t Tags) AppendText(b []byte) []byte {
	b = append(b, '{')
	for i, tg := range t {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, tg.Key...), '='), tg.Value...)
	}
	return append(b, '}')
}

// MarshalJSON writes t as a JSON object with its keys in order (as encoding/json writes a
// map); nil is null.
func (t Tags) MarshalJSON() ([]byte, error) {
	if t == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 2+len(t)*24)
	b = append(b, '{')
	for i, tg := range t {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, tg.Key)
		b = append(b, ':')
		b = jsontext.AppendString(b, tg.Value)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads a JSON object of string values (null gives nil).
func (t *Tags) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*t = nil
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("tags: %w", err)
	}
	*t = Of(m)
	return nil
}
