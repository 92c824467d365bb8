package mesh

import (
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A resource without labels or a creation time (every Dataplane of Kuma's universal form)
// pays one pointer for them, not 32 bytes; one with them reads them back.
func TestMetaExtraOnlyWhenWritten(t *testing.T) {
	rs, err := Decode("m.yaml", []byte(`type: Dataplane
mesh: default
name: plain
networking:
  address: 10.0.0.1
  inbound:
  - port: 80
    tags:
      kuma.io/service: a
---
type: Dataplane
mesh: default
name: labelled
labels:
  team: x
creationTime: "2024-01-02T03:04:05Z"
networking:
  address: 10.0.0.2
  inbound:
  - port: 80
    tags:
      kuma.io/service: b
`))
	if err != nil {
		t.Fatal(err)
	}
	plain, labelled := rs[0].GetMeta(), rs[1].GetMeta()
	if plain.MetaExtra != nil || plain.Labels() != nil || !plain.CreationTime().IsZero() {
		t.Errorf("plain: extra %+v, labels %v, created %v; want none", plain.MetaExtra, plain.Labels(), plain.CreationTime())
	}
	if labelled.Labels()["team"] != "x" || !labelled.CreationTime().Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("labelled: labels %v, created %v", labelled.Labels(), labelled.CreationTime())
	}
	if n := unsafe.Sizeof(Meta{}); n > 56 {
		t.Errorf("Meta is %d bytes, want at most 56", n)
	}
	// a copy set apart leaves the original as it was (decoded resources are shared)
	c := *labelled
	c.SetCreationTime(time.Time{})
	c.SetLabels(nil)
	if c.MetaExtra != nil {
		t.Errorf("copy with neither: extra %+v, want nil", c.MetaExtra)
	}
	if labelled.Labels()["team"] != "x" || labelled.CreationTime().IsZero() {
		t.Errorf("original changed through its copy: labels %v, created %v", labelled.Labels(), labelled.CreationTime())
	}
}

// A Dataplane's kept fields live in its MetaExtra, which every kind has: only a Dataplane's
// document accepts them.
func TestKeptFieldsAreADataplanesAlone(t *testing.T) {
	_, err := Decode("vo.yaml", []byte(`type: VirtualOutbound
mesh: default
name: vo
probes:
  port: 9000
selectors:
- match:
    kuma.io/service: "*"
conf:
  host: "{{.service}}.mesh"
  port: "80"
  parameters:
  - name: service
    tagKey: kuma.io/service
`))
	if err == nil || !strings.Contains(err.Error(), "probes") || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("a VirtualOutbound with probes: %v, want an unknown field error naming it", err)
	}
	rs, err := Decode("dps.yaml", []byte(`type: Dataplane
mesh: default
name: a
probes:
  port: 9000
networking:
  address: 10.0.0.1
  inbound:
  - port: 80
    tags:
      kuma.io/service: a
---
type: Dataplane
mesh: default
name: b
probes:
  port: 9000
networking:
  address: 10.0.0.2
  inbound:
  - port: 80
    tags:
      kuma.io/service: b
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := rs[0].(*Dataplane), rs[1].(*Dataplane)
	if a.Kept() == nil || string(a.Kept().Probes) != `{"port":9000}` || a.MetaExtra != b.MetaExtra {
		t.Errorf("kept probes %v; extras shared: %v", a.Kept(), a.MetaExtra == b.MetaExtra)
	}
	if n := unsafe.Sizeof(dataplaneCell{}); n > 144 {
		t.Errorf("a one-inbound dataplane is %d bytes, want at most 144 (a size class of Go's allocator)", n)
	}
}
