package mesh

import (
	"slices"
	"strings"
	"testing"
)

// The Kuma fields the agent keeps without acting on them are named, so that it can say so.
func TestKeptFields(t *testing.T) {
	doc := strings.Replace(dpA, "    tags:\n      kuma.io/service: a\n",
		"    state: NotReady\n    health: {ready: false}\n    serviceProbe: {tcp: {}}\n    tags:\n      kuma.io/service: a\n", 1) +
		"  admin: {port: 9901}\n  transparentProxying:\n    reachableServices: [db]\nmetrics: {type: prometheus}\n"
	rs, err := Decode("dp.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := rs[0].(*Dataplane).KeptFields()
	want := []string{"metrics", "networking.admin", "networking.inbound[].serviceProbe"}
	if !slices.Equal(got, want) {
		t.Fatalf("KeptFields = %q, want %q", got, want)
	}
	plain, err := Decode("dp.yaml", []byte(dpA))
	if err != nil {
		t.Fatal(err)
	}
	if got := plain[0].(*Dataplane).KeptFields(); got != nil {
		t.Fatalf("a plain dataplane: KeptFields = %q, want none", got)
	}
}
