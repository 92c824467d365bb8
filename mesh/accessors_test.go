package mesh

import "testing"

// The small accessors the allocator and the generator rely on: an inbound's naming, the
// dataplane's zone, a route's wildcard default.
func TestAccessors(t *testing.T) {
	inbounds := []struct {
		in             Inbound
		ignored, named bool
	}{
		{Inbound{Port: 80}, false, true},
		{Inbound{Port: 80, InboundExtra: &InboundExtra{State: InboundIgnored}}, true, false},
		{Inbound{Port: FirstReservedPort}, false, false},
	}
	for _, tc := range inbounds {
		if tc.in.Ignored() != tc.ignored || tc.in.Named() != tc.named {
			t.Errorf("%+v: Ignored %v Named %v, want %v %v", tc.in, tc.in.Ignored(), tc.in.Named(), tc.ignored, tc.named)
		}
	}
	var none *Snapshot
	zoned := &Snapshot{Self: &Dataplane{Networking: Networking{Inbound: []Inbound{
		{Port: 80, Tags: TagsOf(map[string]string{ServiceTag: "a"})}, {Port: 81, Tags: TagsOf(map[string]string{ZoneTag: "eu"})}}}}}
	for _, tc := range []struct {
		s    *Snapshot
		want string
	}{{none, ""}, {&Snapshot{}, ""}, {&Snapshot{Self: &Dataplane{}}, ""}, {zoned, "eu"}} {
		if got := tc.s.LocalZone(); got != tc.want {
			t.Errorf("LocalZone = %q, want %q", got, tc.want)
		}
	}
	if got := (&Route{}).WildcardPolicyOf(); got != WildcardNone {
		t.Errorf("default wildcard policy %q", got)
	}
	if got := (&Route{WildcardPolicy: "Subdomain"}).WildcardPolicyOf(); got != "Subdomain" {
		t.Errorf("wildcard policy %q", got)
	}
}
