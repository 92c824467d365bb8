package api

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The agents of this replica and of the others are one list, each with its replicas; GET
// /agents serves it and the client reads it; inspect dataplanes marks each dataplane
// Online (its agent connected to any replica) or Offline.
func TestAgentsAndInspect(t *testing.T) {
	got := MergeAgents([]string{"default/web-1", "shop/edge"}, "replica-a", map[string][]string{"default/web-1": {"replica-b"}, "default/api": {"replica-c"}})
	want := []Agent{{"default", "api", []string{"replica-c"}}, {"default", "web-1", []string{"replica-a", "replica-b"}}, {"shop", "edge", []string{"replica-a"}}}
	if len(got) != len(want) {
		t.Fatalf("MergeAgents: %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Mesh != want[i].Mesh || got[i].Name != want[i].Name || strings.Join(got[i].Replicas, ",") != strings.Join(want[i].Replicas, ",") {
			t.Errorf("MergeAgents[%d]: %v, want %v", i, got[i], want[i])
		}
	}
	srv := httptest.NewServer((&Server{Agents: func() []Agent { return got }}).Handler())
	defer srv.Close()
	read, err := NewClient(srv.URL, "").Agents(context.Background())
	if err != nil || len(read) != 3 || read[1].Name != "web-1" || len(read[1].Replicas) != 2 {
		t.Fatalf("GET /agents: %v %v", read, err)
	}
	none := httptest.NewServer((&Server{}).Handler())
	defer none.Close()
	if _, err := NewClient(none.URL, "").Agents(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("GET /agents of a server without agents: %v", err)
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	dp := func(name, service string) Resource {
		return resourceOf(t, "dataplanes", "type: Dataplane\nmesh: default\nname: "+name+"\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: "+service+"}\n", now.Add(-time.Hour), now.Add(-2*time.Minute))
	}
	var b strings.Builder
	if err := PrintInspectDataplanes(&b, []Resource{dp("web-1", "web"), dp("web-2", "web")}, read, now); err != nil {
		t.Fatal(err)
	}
	wantTable := `MESH     NAME   TAGS                 STATUS   REPLICAS             AGE
default  web-1  kuma.io/service=web  Online   replica-a,replica-b  2m
default  web-2  kuma.io/service=web  Offline  -                    2m
`
	if b.String() != wantTable {
		t.Errorf("inspect dataplanes:\n%s\nwant:\n%s", b.String(), wantTable)
	}
	// -o json and yaml: the same rows, for scripts.
	for format, want := range map[string]string{
		"json": `{
  "total": 2,
  "items": [
    {
      "mesh": "default",
      "name": "web-1",
      "status": "Online",
      "replicas": [
        "replica-a",
        "replica-b"
      ]
    },
    {
      "mesh": "default",
      "name": "web-2",
      "status": "Offline"
    }
  ]
}
`,
		"yaml": `items:
- mesh: default
  name: web-1
  replicas:
  - replica-a
  - replica-b
  status: Online
- mesh: default
  name: web-2
  status: Offline
total: 2
`,
	} {
		b.Reset()
		if err := PrintInspectDataplanesAs(&b, format, []Resource{dp("web-1", "web"), dp("web-2", "web")}, read, now); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("inspect dataplanes -o %s:\n%s\nwant:\n%s", format, b.String(), want)
		}
	}
	if err := PrintInspectDataplanesAs(&b, "wide", nil, nil, now); err == nil || !strings.Contains(err.Error(), `-o "wide"`) {
		t.Errorf("-o wide: %v", err)
	}
}
