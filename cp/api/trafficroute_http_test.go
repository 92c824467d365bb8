package api

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/store"
)

// kuma-cp checks a TrafficRoute with Kuma's conf.http with the agent's validator: a valid
// one is accepted, a bad rule refused naming its field.
func TestCheckTrafficRouteHTTP(t *testing.T) {
	doc := "type: TrafficRoute\nname: api\nmesh: default\n" +
		"sources:\n  - match:\n      kuma.io/service: '*'\ndestinations:\n  - match:\n      kuma.io/service: backend\n" +
		"conf:\n  destination:\n    kuma.io/service: backend\n  http:\n" +
		"  - match:\n      path: {prefix: /api}\n    modify:\n      path: {rewritePrefix: /v2}\n" +
		"    destination: {kuma.io/service: backend, version: v2}\n"
	k := store.Key{Mesh: "default", Type: "TrafficRoute", Name: "api"}
	if msg := Check(k, []byte(doc)); msg != "" {
		t.Fatalf("refused: %s", msg)
	}
	bad := strings.Replace(doc, "prefix: /api", "exact: /api", 1)
	if msg := Check(k, []byte(bad)); !strings.Contains(msg, "conf.http[0].modify.path.rewritePrefix: needs a path prefix match") {
		t.Errorf("got %q", msg)
	}
}
