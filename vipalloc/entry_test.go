package vipalloc

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/tagset"
)

// An entry's JSON shows its detail's fields beside the others, in the order and with the
// names the /vips endpoint has always had, and reads back to an equal entry.
func TestEntryJSON(t *testing.T) {
	sel := tagset.FromPairs("kuma.io/service", "*")
	e := NewEntry(Entry{Hostname: "web.mesh", IPv4: netip.MustParseAddr("240.0.0.1"), IPv6: netip.MustParseAddr("fd00::1"),
		Ports: []uint32{80, 8080}, Origin: Origin{Kind: "VirtualOutbound", Name: "vo"}, Key: "vo{kuma.io/service=web}",
		Tags: tagset.FromPairs("kuma.io/service", "web"), Status: NotAvailable},
		EntryDetail{Reason: "pool full", MeshExternalService: "ext", Selector: sel,
			Targets: []Target{{Port: 80, Origin: Origin{Kind: "VirtualOutbound", Name: "vo"}, Key: "k"}}})
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"hostname":"web.mesh","ipv4":"240.0.0.1","ipv6":"fd00::1","ports":[80,8080],` +
		`"origin":{"kind":"VirtualOutbound","name":"vo"},"key":"vo{kuma.io/service=web}","tags":{"kuma.io/service":"web"},` +
		`"status":"NotAvailable","reason":"pool full","meshExternalService":"ext","selector":{"kuma.io/service":"*"},` +
		`"targets":[{"port":80,"origin":{"kind":"VirtualOutbound","name":"vo"},"key":"k","tags":null}]}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Reason() != "pool full" || back.MeshExternalService() != "ext" || !back.Selector().Equal(sel) ||
		len(back.Targets()) != 1 || back.Status != NotAvailable || back.Hostname != e.Hostname {
		t.Errorf("read back %+v detail %+v", back, back.Detail())
	}

	plain := Entry{Hostname: "a.mesh", Status: Available}
	b, _ = json.Marshal(&plain)
	if strings.Contains(string(b), "reason") || !strings.Contains(string(b), `"status":"Available"`) {
		t.Errorf("an entry without detail: %s", b)
	}
	if plain.Reason() != "" || plain.Targets() != nil || plain.Selector() != nil || plain.MeshExternalService() != "" {
		t.Error("an entry without detail has detail")
	}
}

// Setting a reason on an entry whose detail is shared (a selector's candidates share one)
// copies the detail: the others keep theirs.
func TestSetReasonNeverWritesASharedDetail(t *testing.T) {
	shared := &EntryDetail{Selector: tagset.FromPairs("kuma.io/service", "*")}
	a, b := Entry{detail: shared}, Entry{detail: shared}
	a.setReason("lost")
	if a.Reason() != "lost" || b.Reason() != "" || shared.Reason != "" || !a.Selector().Equal(shared.Selector) {
		t.Errorf("a %+v, b %+v, shared %+v", a.Detail(), b.Detail(), *shared)
	}
	a.setReason("")
	if a.detail == nil || a.Reason() != "" {
		t.Errorf("clearing the reason lost the selector: %+v", a.Detail())
	}
}

func TestStatusText(t *testing.T) {
	for _, s := range []Status{Available, NotAvailable} {
		b, _ := s.MarshalText()
		var back Status
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v: %s read back as %v (%v)", s, b, back, err)
		}
	}
	var s Status
	if err := s.UnmarshalText([]byte("Maybe")); err == nil {
		t.Error("an unknown status read without an error")
	}
}

// The entry of a hostname fits the 176-byte size class and its candidate the 192-byte one.
func TestEntrySizes(t *testing.T) {
	if got := sizeofEntry(); got > 176 {
		t.Errorf("Entry is %d bytes, want <= 176", got)
	}
	if got := sizeofCandidate(); got > 192 {
		t.Errorf("candidate is %d bytes, want <= 192", got)
	}
}
