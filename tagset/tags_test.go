package tagset

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

func TestOfSortsAndGets(t *testing.T) {
	m := map[string]string{"version": "v1", "kuma.io/service": "web", "a": "", "kuma.io/zone": "z"}
	tags := Of(m)
	want := Tags{{"a", ""}, {"kuma.io/service", "web"}, {"kuma.io/zone", "z"}, {"version", "v1"}}
	if !tags.Equal(want) {
		t.Fatalf("Of = %v, want %v", tags, want)
	}
	for k, v := range m {
		if got, ok := tags.Get(k); !ok || got != v {
			t.Errorf("Get(%q) = %q, %v; want %q, true", k, got, ok, v)
		}
	}
	if v, ok := tags.Get("missing"); ok || v != "" {
		t.Errorf("Get(missing) = %q, %v", v, ok)
	}
	if !tags.Has("a") || tags.Has("b") {
		t.Errorf("Has: a %v, b %v", tags.Has("a"), tags.Has("b"))
	}
	if !maps.Equal(tags.Map(), m) {
		t.Errorf("Map = %v, want %v", tags.Map(), m)
	}
	if Of(nil) != nil || Of(map[string]string{}) == nil {
		t.Error("Of keeps nil and empty apart, as maps are")
	}
}

// Get agrees with a map on sets small enough for a linear search and large enough for a
// binary one.
func TestGetAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 8, 9, 40} {
		m := map[string]string{}
		for len(m) < n {
			m[fmt.Sprintf("k%d", rng.IntN(200))] = fmt.Sprint(rng.IntN(5))
		}
		tags := Of(m)
		for i := range 200 {
			k := fmt.Sprintf("k%d", i)
			want, wok := m[k]
			if got, ok := tags.Get(k); got != want || ok != wok {
				t.Fatalf("n=%d Get(%q) = %q, %v; want %q, %v", n, k, got, ok, want, wok)
			}
		}
	}
}

func TestWithWithoutLeaveTheOriginal(t *testing.T) {
	base := FromPairs("kuma.io/service", "web", "version", "v1")
	w := base.With("kuma.io/zone", "z1")
	if !w.Equal(FromPairs("kuma.io/service", "web", "kuma.io/zone", "z1", "version", "v1")) {
		t.Errorf("With = %v", w)
	}
	r := base.With("version", "v2")
	if r.Value("version") != "v2" || base.Value("version") != "v1" {
		t.Errorf("With replaced in the original: %v %v", r, base)
	}
	wo := w.Without("kuma.io/service")
	if wo.Has("kuma.io/service") || !w.Has("kuma.io/service") || len(wo) != 2 {
		t.Errorf("Without = %v (from %v)", wo, w)
	}
	if got := base.Without("nope"); len(got) != len(base) {
		t.Errorf("Without of an absent key = %v", got)
	}
	if got := FromPairs("a", "1", "a", "2"); !got.Equal(Tags{{"a", "2"}}) {
		t.Errorf("FromPairs: the last value of a key wins, got %v", got)
	}
	if got := Sorted(Tags{{"b", "1"}, {"a", "1"}, {"b", "2"}}); !got.Equal(Tags{{"a", "1"}, {"b", "2"}}) {
		t.Errorf("Sorted = %v", got)
	}
}

func TestMatches(t *testing.T) {
	inbound := FromPairs("kuma.io/service", "web", "kuma.io/zone", "east", "version", "v1")
	for _, tc := range []struct {
		sel  Tags
		want bool
	}{
		{FromPairs("kuma.io/service", "web"), true},
		{FromPairs("kuma.io/service", "*"), true},
		{FromPairs("kuma.io/service", "web", "version", "v1"), true},
		{FromPairs("kuma.io/service", "web", "version", "v2"), false},
		{FromPairs("kuma.io/service", "web", "team", "*"), false},
		{FromPairs("a", "*"), false},
		{FromPairs("zzz", "*"), false},
		{Tags{}, false},
		{nil, false},
	} {
		if got := tc.sel.Matches(inbound); got != tc.want {
			t.Errorf("%v.Matches(%v) = %v, want %v", tc.sel, inbound, got, tc.want)
		}
	}
}

// The JSON of a Tags is exactly that of the map it holds (keys sorted, the same escapes,
// null for nil, {} for empty), and it reads back.
func TestJSONIsTheMapsJSON(t *testing.T) {
	for _, m := range []map[string]string{
		nil, {}, {"kuma.io/service": "web"},
		{"z": "1", "a": "<&>", "q\"uote": "line\nbreak", "ü": "ñ"},
	} {
		got, err := json.Marshal(Of(m))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m)
		if string(got) != string(want) {
			t.Errorf("Marshal(%v) = %s, want %s", m, got, want)
		}
		var back Tags
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(Of(m)) || (m == nil) != (back == nil) {
			t.Errorf("round trip of %s = %#v", got, back)
		}
	}
	var bad Tags
	if err := json.Unmarshal([]byte(`{"a": 1}`), &bad); err == nil {
		t.Error("a number as a tag value decoded without an error")
	}
}

func TestString(t *testing.T) {
	if got := FromPairs("version", "v1", "kuma.io/service", "web").String(); got != "{kuma.io/service=web,version=v1}" {
		t.Errorf("String = %s", got)
	}
}

// A one-tag set costs one 32-byte allocation; a map of one entry costs ten times that.
func TestOneTagIsOneSmallAllocation(t *testing.T) {
	var sink Tags
	allocs := testing.AllocsPerRun(100, func() { sink = FromPairs("kuma.io/service", "web") })
	if allocs != 1 {
		t.Errorf("FromPairs of one tag: %v allocations, want 1", allocs)
	}
	_ = sink
}

func BenchmarkGet(b *testing.B) {
	tags := FromPairs("kuma.io/service", "web", "kuma.io/zone", "east", "version", "v1", "team", "a")
	for b.Loop() {
		if _, ok := tags.Get("version"); !ok {
			b.Fatal("missing")
		}
	}
}
