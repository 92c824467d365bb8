package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/cp/store"
)

func resourceOf(t *testing.T, typ, doc string, created, modified time.Time) Resource {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Mesh, Name string }
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	return Resource{Mesh: m.Mesh, Type: typ, Name: m.Name, Version: 1764151338123456, CreationTime: created, ModificationTime: modified, Spec: j}
}

// get's tables are kumactl's: dataplanes MESH NAME TAGS ADDRESS AGE (the tags of every
// inbound and the gateway, key=value sorted, a key's values joined by commas; the advertised
// address when set), every other type MESH NAME AGE; AGE is since the last modification, in
// kumactl's units. The table was MESH TYPE NAME VERSION AGE for every type, the version a
// store revision (on the directory store a number of 16 digits).
func TestTablesAreKumactls(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	dp := resourceOf(t, "dataplanes", `type: Dataplane
mesh: default
name: web-1
networking:
  address: 10.0.0.1
  inbound:
  - port: 8080
    tags: {kuma.io/service: web, version: v2}
  - port: 8081
    tags: {kuma.io/service: web-admin, version: v2}
`, now.Add(-50*time.Hour), now.Add(-90*time.Minute))
	gw := resourceOf(t, "dataplanes", `type: Dataplane
mesh: other
name: edge
networking:
  address: 10.0.0.2
  advertisedAddress: 192.0.2.7
  gateway:
    tags: {kuma.io/service: edge}
`, now.Add(-40*time.Second), now.Add(-40*time.Second))
	vo := resourceOf(t, "virtualoutbounds", `type: VirtualOutbound
mesh: default
name: by-version
selectors:
- match: {kuma.io/service: "*"}
conf:
  host: "{{service}}.mesh"
  port: "80"
  parameters:
  - name: service
    tagKey: kuma.io/service
`, now.Add(-400*24*time.Hour), now.Add(-3*24*time.Hour))
	for _, c := range []struct {
		what, typ string
		rs        []Resource
		want      string
	}{
		{"dataplanes", "dataplanes", []Resource{dp, gw}, `MESH     NAME   TAGS                                      ADDRESS    AGE
default  web-1  kuma.io/service=web,web-admin version=v2  10.0.0.1   1h
other    edge   kuma.io/service=edge                      192.0.2.7  40s
`},
		{"virtual outbounds", "virtualoutbounds", []Resource{vo}, `MESH     NAME        AGE
default  by-version  3d
`},
		{"no dataplane (the header, as kumactl)", "dataplanes", nil, "MESH  NAME  TAGS  ADDRESS  AGE\n"},
		{"no traffic route", "trafficroutes", nil, "MESH  NAME  AGE\n"},
	} {
		var b strings.Builder
		if err := Print(&b, "table", c.typ, c.rs, now); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.what, b.String(), c.want)
		}
	}
	var b strings.Builder
	if err := PrintOne(&b, "table", dp, now); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "MESH     NAME   TAGS") || strings.Contains(b.String(), "1764151338123456") {
		t.Errorf("one dataplane:\n%s", b.String())
	}
	for d, want := range map[time.Duration]string{-5 * time.Second: "0s", 59 * time.Second: "59s", 61 * time.Minute: "1h", 25 * time.Hour: "1d", 800 * 24 * time.Hour: "2y"} {
		if got := Age(now.Add(-d), now); got != want {
			t.Errorf("Age of %s: %q, want %q", d, got, want)
		}
	}
}

// A gateway's tags are shown whatever YAML read their values as: a number or a boolean
// (version: 2, which the API takes) dropped every gateway tag from TAGS ("-"). (A tag key
// with whitespace, which split the cell, is refused by the API now, as Kuma refuses it.)
func TestTableGatewayTagsOfEveryValue(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	doc := `type: Dataplane
mesh: default
name: edge
networking:
  address: 10.0.0.2
  gateway:
    tags: {kuma.io/service: edge, version: 2, canary: true}
`
	if msg := Check(store.Key{Mesh: "default", Type: "Dataplane", Name: "edge"}, []byte(doc)); msg != "" {
		t.Fatalf("the API refuses the dataplane: %s", msg)
	}
	var b strings.Builder
	if err := Print(&b, "table", "dataplanes", []Resource{resourceOf(t, "dataplanes", doc, now, now)}, now); err != nil {
		t.Fatal(err)
	}
	want := `MESH     NAME  TAGS                                        ADDRESS   AGE
default  edge  canary=true kuma.io/service=edge version=2  10.0.0.2  0s
`
	if b.String() != want {
		t.Errorf("gateway tags:\n%s\nwant:\n%s", b.String(), want)
	}
}
