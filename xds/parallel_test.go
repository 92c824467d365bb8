package xds

import (
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"
)

// Full generations build their messages on every core: the result must not depend on the
// number of cores (the golden tests pin the content for the scenarios).
func TestGenerateSameOnEveryCoreCount(t *testing.T) {
	s, tab := bigWorld(t, 600)
	gen := func(procs int) *Resources {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		r, err := Generate(s, tab, tproxy)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	one, many := gen(1), gen(4)
	if len(one.Listeners) != len(many.Listeners) || len(one.Clusters) != len(many.Clusters) || len(one.Endpoints) != len(many.Endpoints) {
		t.Fatalf("counts differ: %d/%d/%d vs %d/%d/%d", len(one.Listeners), len(one.Clusters), len(one.Endpoints),
			len(many.Listeners), len(many.Clusters), len(many.Endpoints))
	}
	for i := range one.Listeners {
		if !proto.Equal(one.Listeners[i], many.Listeners[i]) {
			t.Fatalf("listener %d differs: %v vs %v", i, one.Listeners[i], many.Listeners[i])
		}
	}
	for i := range one.Clusters {
		if !proto.Equal(one.Clusters[i], many.Clusters[i]) {
			t.Fatalf("cluster %d differs", i)
		}
	}
	for i := range one.Endpoints {
		if !proto.Equal(one.Endpoints[i], many.Endpoints[i]) {
			t.Fatalf("assignment %d differs", i)
		}
	}
}

// Validation checks the message a generation packed instead of unpacking its Any: the two
// must be the same message, for every Any it remembered.
func TestPackedMessagesMatchTheirAnys(t *testing.T) {
	s, tab := bigWorld(t, 300)
	r, err := Generate(s, tab, tproxy)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.packed) < 300 {
		t.Fatalf("only %d packed messages remembered", len(r.packed))
	}
	for a, m := range r.packed {
		got, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("Any %s holds %v, remembered %v", a.GetTypeUrl(), got, m)
		}
	}
	// And a remembered message that fails validation is still caught.
	for _, l := range r.Listeners {
		a := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
		if m, ok := r.packed[a]; ok {
			bad := proto.Clone(m)
			bad.ProtoReflect().Clear(bad.ProtoReflect().Descriptor().Fields().ByName("stat_prefix"))
			r.packed[a] = bad
			if err := r.Validate(); err == nil {
				t.Fatal("an invalid remembered tcp_proxy passed validation")
			}
			return
		}
	}
	t.Fatal("no listener filter was remembered")
}
