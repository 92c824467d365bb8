package mesh

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSelectorMatches(t *testing.T) {
	tags := TagsOf(map[string]string{ServiceTag: "backend", "version": "v1", ZoneTag: "zone-1"})
	tests := []struct {
		sel  Tags
		want bool
	}{
		{TagsOf(map[string]string{ServiceTag: "backend"}), true},
		{TagsOf(map[string]string{ServiceTag: "*"}), true},
		{TagsOf(map[string]string{ServiceTag: "backend", "version": "*"}), true},
		{TagsOf(map[string]string{ServiceTag: "backend", "version": "v2"}), false},
		{TagsOf(map[string]string{ServiceTag: "*", "region": "*"}), false}, // "*" still needs the tag
		{Tags{}, false}, // an empty selector matches nothing
		{nil, false},
	}
	for _, tt := range tests {
		if got := (Selector{Match: tt.sel}).Matches(tags); got != tt.want {
			t.Errorf("%v matches %v = %v, want %v", tt.sel, tags, got, tt.want)
		}
	}
}

// TestRankTrafficRouteDesign covers the L4 TrafficRoute design's ordering: more tags > exact over "*" > newest > name.
func TestRankTrafficRouteDesign(t *testing.T) {
	old := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := old.Add(time.Hour)
	tests := []struct {
		name          string
		better, worse Rank
	}{
		{"B: two tags beat one, even if older",
			RankOf(TagsOf(map[string]string{ServiceTag: "mobile", "version": "2"}), old, "z"), RankOf(TagsOf(map[string]string{ServiceTag: "mobile"}), newer, "a")},
		{"two wildcard tags beat one exact tag",
			RankOf(TagsOf(map[string]string{ServiceTag: "*", "version": "*"}), old, "z"), RankOf(TagsOf(map[string]string{ServiceTag: "mobile"}), newer, "a")},
		{"C: exact beats *, even if older",
			RankOf(TagsOf(map[string]string{ServiceTag: "mobile"}), old, "z"), RankOf(TagsOf(map[string]string{ServiceTag: "*"}), newer, "a")},
		{"A/D: same shape, the newest wins",
			RankOf(TagsOf(map[string]string{ServiceTag: "mobile", "region": "eu"}), newer, "z"), RankOf(TagsOf(map[string]string{ServiceTag: "mobile", "version": "2"}), old, "a")},
		{"all equal: the lower name wins",
			RankOf(TagsOf(map[string]string{ServiceTag: "mobile"}), old, "a"), RankOf(TagsOf(map[string]string{ServiceTag: "mobile"}), old, "b")},
	}
	for _, tt := range tests {
		if !tt.better.Better(tt.worse) {
			t.Errorf("%s: %+v should beat %+v", tt.name, tt.better, tt.worse)
		}
		if tt.worse.Better(tt.better) {
			t.Errorf("%s: %+v should not beat %+v", tt.name, tt.worse, tt.better)
		}
	}
	r := RankOf(TagsOf(map[string]string{ServiceTag: "a"}), old, "a")
	if r.Better(r) {
		t.Error("a rank beats itself: the order is not strict")
	}
}

func TestBestMatch(t *testing.T) {
	sels := []Selector{
		{Match: TagsOf(map[string]string{ServiceTag: "*"})},
		{Match: TagsOf(map[string]string{ServiceTag: "mobile", "version": "*"})},
		{Match: TagsOf(map[string]string{ServiceTag: "mobile", "version": "3"})},
	}
	r, ok := BestMatch(sels, TagsOf(map[string]string{ServiceTag: "mobile", "version": "2"}), time.Time{}, "r")
	if !ok || r.Tags != 2 || r.Exact != 1 {
		t.Errorf("BestMatch = %+v, %v; want the mobile+version:* selector", r, ok)
	}
	if _, ok := BestMatch(sels, TagsOf(map[string]string{"version": "2"}), time.Time{}, "r"); ok {
		t.Error("BestMatch matched tags without kuma.io/service")
	}
}

// TestTrafficRouteScenarios loads testdata/trafficroute (the L4 TrafficRoute design's corner cases, as the
// design writes them) and checks which rule wins for mobile -> backend.
func TestTrafficRouteScenarios(t *testing.T) {
	tests := []struct {
		dir, dataplane, winner string
	}{
		{"A-identical-selectors", "dataplane.yaml", "rule-2"},
		{"B-more-tags", "dataplane.yaml", "rule-2"},
		{"C-exact-over-wildcard", "dataplane.yaml", "rule-1"},
		{"D-different-tags", "dataplane.yaml", "rule-2"},
		{"F-later-collision", "dataplane-before.yaml", "rule-1"},
		{"F-later-collision", "dataplane.yaml", "rule-2"},
	}
	for _, tt := range tests {
		t.Run(tt.dir+"/"+tt.dataplane, func(t *testing.T) {
			base := filepath.Join("..", "testdata", "trafficroute", tt.dir)
			s, err := Load(filepath.Join(base, tt.dataplane), filepath.Join(base, "policies"))
			if err != nil {
				t.Fatal(err)
			}
			if got := bestRoute(s, "backend"); got != tt.winner {
				t.Errorf("winner %q, want %q", got, tt.winner)
			}
		})
	}
	_, err := Load("../testdata/trafficroute/E-one-rule-per-route/dataplane.yaml", "../testdata/trafficroute/E-one-rule-per-route/policies")
	var es Errors
	if !errors.As(err, &es) || es[0].Path != "rules" || !strings.Contains(es[0].Msg, "one rule") {
		t.Errorf("case E: error %v, want the rules field refused", err)
	}
}

// bestRoute is the L4 TrafficRoute design's selection for one outbound service: the rules whose sources match
// one of self's inbounds and whose destinations match the service, best source match first.
func bestRoute(s *Snapshot, service string) string {
	var best Rank
	winner := ""
	for _, tr := range s.TrafficRoutes {
		dst := false
		for _, d := range tr.Destinations {
			dst = dst || d.Matches(TagsOf(map[string]string{ServiceTag: service}))
		}
		if !dst {
			continue
		}
		for _, in := range s.Self.Networking.Inbound {
			if r, ok := BestMatch(tr.Sources, in.Tags, tr.CreationTime(), tr.Name); ok && (winner == "" || r.Better(best)) {
				best, winner = r, tr.Name
			}
		}
	}
	return winner
}
