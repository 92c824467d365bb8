package decoded

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

func item(m, typ, name, doc string) store.Item {
	return store.Item{Key: store.Key{Mesh: m, Type: typ, Name: name}, Doc: []byte(doc), Version: 1}
}

// As takes a document as the kind and mesh its key names: another kind, or a document that
// does not decode, is an error saying so; a document naming another mesh (stored by hand) is
// taken in its key's mesh, as a copy - the decoded resource the other followers read keeps
// its own.
func TestAsTakesTheKeysKindAndMesh(t *testing.T) {
	dp := "type: Dataplane\nmesh: elsewhere\nname: dp-1\nnetworking: {address: 10.0.0.1, inbound: [{port: 80, tags: {kuma.io/service: web}}]}\n"
	it := item("default", mesh.KindDataplane, "dp-1", dp)
	got, err := As[*mesh.Dataplane](it)
	if err != nil || got.Mesh != "default" || got.Name != "dp-1" {
		t.Fatalf("As: %+v, %v; want dp-1 in mesh default", got, err)
	}
	rs, err := Resources(it)
	if err != nil || rs[0].GetMeta().Mesh != "elsewhere" {
		t.Fatalf("the decoded document changed: mesh %q, %v", rs[0].GetMeta().Mesh, err)
	}
	if _, err := As[*mesh.Router](it); err == nil || !strings.Contains(err.Error(), "a Dataplane, not of its key's kind Dataplane") {
		t.Errorf("a Dataplane taken as a Router: %v", err)
	}
	if _, err := As[*mesh.Dataplane](item("default", mesh.KindDataplane, "x", "type: Dataplane\nname: [\n")); err == nil || !strings.HasPrefix(err.Error(), "does not decode: ") {
		t.Errorf("a document that does not decode: %v", err)
	}
}

// Copy is a resource whose fields can be set without touching the one copied.
func TestCopyLeavesTheOriginal(t *testing.T) {
	r := &mesh.Router{Meta: mesh.Meta{Mesh: "default", Name: "shard1"}, Status: &mesh.RouterStatus{ReadyReplicas: 2}}
	c := Copy(r)
	c.Status, c.Name = nil, "other"
	if r.Status == nil || r.Name != "shard1" {
		t.Fatalf("the original changed: %+v", r)
	}
	var res mesh.Resource = r
	if cr := Copy(res); cr == res || cr.GetMeta().Name != "shard1" {
		t.Fatalf("Copy of a mesh.Resource: %+v", cr)
	}
}
