package mesh

import (
	"slices"
	"strings"
	"testing"
)

func TestReach(t *testing.T) {
	dp := func(name string, svcs ...string) *Dataplane {
		d := &Dataplane{Meta: Meta{Mesh: "default", Name: name}, Networking: Networking{Address: "10.0.0.1"}}
		for _, s := range svcs {
			d.Networking.Inbound = append(d.Networking.Inbound, Inbound{Port: 80, Tags: TagsOf(map[string]string{ServiceTag: s})})
		}
		return d
	}
	self := dp("me", "me")
	if ReachOf(self) != nil || ReachOf(nil) != nil {
		t.Fatal("a dataplane without reachableServices reaches every service")
	}
	self.Networking.Extra().TransparentProxying = &TransparentProxying{ReachableServices: []string{"db", "api", "db"}}
	r := ReachOf(self)
	if r.Key() != "api\ndb" { // sorted, each once
		t.Fatalf("Key %q", r.Key())
	}
	if !r.Keeps(self) {
		t.Error("the dataplane does not keep itself (its service me is not listed)")
	}
	for _, tc := range []struct {
		dp   *Dataplane
		want bool
	}{
		{dp("db-1", "db"), true}, {dp("multi", "web", "api"), true}, {dp("web-1", "web"), false}, {dp("none"), false},
	} {
		if got := r.Keeps(tc.dp); got != tc.want {
			t.Errorf("Keeps(%s) = %v, want %v", tc.dp.Name, got, tc.want)
		}
	}
	vo := &VirtualOutbound{Meta: Meta{Name: "vo"}}
	all := []Resource{dp("db-1", "db"), dp("web-1", "web"), vo}
	kept := r.Filter(all)
	if len(kept) != 2 || kept[0].GetMeta().Name != "db-1" || kept[1] != Resource(vo) || len(all) != 3 {
		t.Errorf("Filter = %v (input %d long)", kept, len(all))
	}
	if got := (*Reach)(nil).Filter(all); len(got) != 3 {
		t.Errorf("a nil Reach filtered: %v", got)
	}

	s, err := NewSnapshot(self, all)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range s.Dataplanes {
		got = append(got, d.Name)
	}
	if !slices.Equal(got, []string{"db-1", "me"}) {
		t.Errorf("snapshot dataplanes %q, want db-1 and me", got)
	}
}

func TestReachableServicesValidated(t *testing.T) {
	doc := "type: Dataplane\nmesh: default\nname: me\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags:\n      kuma.io/service: me\n" +
		"  transparentProxying:\n    reachableServices: [db, \"\", \"*\", \"a b\", 7]\n"
	_, err := Decode("dp.yaml", []byte(doc))
	if err == nil {
		t.Fatal("bad reachable services accepted")
	}
	for _, want := range []string{
		`reachableServices[1]: empty service name`,
		`reachableServices[2]: a service name, not "*"`,
		`reachableServices[3]: service names cannot contain whitespace (value "a b")`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
