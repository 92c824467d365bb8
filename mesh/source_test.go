package mesh

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"unsafe"
)

func TestSourceString(t *testing.T) {
	for _, tt := range []struct {
		src  Source
		want string
	}{
		{Source{}, ""},
		{NewSource("policies/vo.yaml", 2), "policies/vo.yaml#2"},
		{NewSource("policies/dataplanes.yaml", 12345), "policies/dataplanes.yaml#12345"},
		{NewSource("dp.yaml", 1), "dp.yaml#1"},
		{NewSource("dp.yaml", 0), "dp.yaml"},
		{NewSource("control plane Dataplane/web-1", 1), "control plane Dataplane/web-1#1"},
		{NewSource("", 3), "#3"},
		{NewSource("a#b", 4), "a#b#4"},
		{NewSource("dp.yaml", 1).WithDoc(4294967295), "dp.yaml#4294967295"},
	} {
		if got := tt.src.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.src, got, tt.want)
		}
	}
	if a, b := NewSource("x.yaml", 1), NewSource("y.yaml", 1); a == b || a.File() != "x.yaml" || b.File() != "y.yaml" {
		t.Errorf("two files: %v %v", a, b)
	}
	if NewSource("x.yaml", 7) != NewSource("x.yaml", 3).WithDoc(7) || NewSource("x.yaml", 7).Doc() != 7 {
		t.Error("the same file and document are not one Source")
	}
	if !(Source{}).IsZero() || NewSource("x.yaml", 1).IsZero() {
		t.Error("IsZero")
	}
	if n := unsafe.Sizeof(Source{}); n > 16 {
		t.Errorf("a Source is %d bytes, want at most 16", n)
	}
}

// Goroutines making Sources of the same file at once get equal Sources.
func TestSourceConcurrentRegistration(t *testing.T) {
	const workers, files = 8, 50
	got := make([][]Source, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for f := range files {
				got[w] = append(got[w], NewSource("concurrent/"+string(rune('a'+f%26))+string(rune('a'+f/26))+".yaml", w+1))
			}
		})
	}
	wg.Wait()
	for f := range files {
		want := got[0][f].WithDoc(0)
		for w := range workers {
			if s := got[w][f]; s.WithDoc(0) != want || s.Doc() != w+1 {
				t.Fatalf("file %d, goroutine %d: %v, want the file of %v", f, w, s, want)
			}
		}
	}
}

// Meta.Source stays out of JSON and goes through gob (the decode cache) as it did as a string.
func TestSourceEncoding(t *testing.T) {
	dp := &Dataplane{Meta: Meta{Mesh: "default", Name: "a", Source: NewSource("inv.yaml", 42)}}
	j, err := json.Marshal(dp)
	if err != nil || bytes.Contains(j, []byte("inv.yaml")) || bytes.Contains(j, []byte("ource")) {
		t.Fatalf("JSON %s (%v) shows the source", j, err)
	}
	if j, err := json.Marshal(NewSource("inv.yaml", 42)); err != nil || string(j) != `"inv.yaml#42"` {
		t.Errorf("a Source on its own marshals to %s (%v)", j, err)
	}
	for _, src := range []Source{{}, NewSource("inv.yaml", 42), NewSource("control plane Dataplane/a", 0)} {
		dp.Source = src
		back := gobRoundTrip(t, dp)
		if back.Source != src || back.Name != "a" {
			t.Errorf("gob: %q %q, want %q a", back.Source, back.Name, src)
		}
	}
}
