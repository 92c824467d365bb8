package mesh

import (
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
