package mesh

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unique"
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

// A Source holds its interned name as a handle of package unique would: while one is held,
// NewSource of the same file gives the same name (the table's entry stays), however many
// collections run; In swaps it for its caller's string of the same text, which then prints
// the same and is Same, not SameFile.
func TestSourceInternedNameAndIn(t *testing.T) {
	held := NewSource("held/across-gc.yaml", 1)
	for range 3 {
		runtime.GC()
	}
	if again := NewSource("held/across-gc.yaml", 2); !again.SameFile(held) || again.WithDoc(1) != held {
		t.Fatal("a Source held did not keep its interned name")
	}
	name := strings.Clone("held/across-gc.yaml")
	own := held.WithDoc(7).In(&name)
	if own.String() != "held/across-gc.yaml#7" || own.SameFile(held) || !own.SameFile(NewSource("held/across-gc.yaml", 3).In(&name)) {
		t.Fatalf("In: %v", own)
	}
	if !own.Same(NewSource("held/across-gc.yaml", 7)) || own.Same(held) || own.Same(NewSource("other.yaml", 7)) {
		t.Fatal("Same: not by text and document")
	}
	other := "other.yaml"
	if got := held.In(&other); got != held {
		t.Fatalf("In a name of another text changed the source: %v", got)
	}
	if got := (Source{}).In(&name); !got.IsZero() {
		t.Fatalf("the zero Source in a name: %v", got)
	}
	if got := held.In(nil); got != held {
		t.Fatalf("In no name changed the source: %v", got)
	}
}

// interned reads the one pointer a unique.Handle holds: a Go release that changes the
// Handle's layout must fail here, not read something else.
func TestInternedReadsTheHandlesString(t *testing.T) {
	if unsafe.Sizeof(unique.Handle[string]{}) != unsafe.Sizeof((*string)(nil)) {
		t.Fatalf("unique.Handle[string] is %d bytes, not one pointer", unsafe.Sizeof(unique.Handle[string]{}))
	}
	a, b := unique.Make(strings.Clone("interned.yaml")), unique.Make(strings.Clone("interned.yaml"))
	if p := interned(a); p == nil || *p != "interned.yaml" || p != interned(b) || unsafe.StringData(*p) != unsafe.StringData(a.Value()) {
		t.Fatalf("interned(%v) = %v", a, p)
	}
}
