package bootstrap

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kumadp/kuma-dp/xds"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestWriteGolden(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"admin-socket", Config{Mesh: "default", Name: "web-1", Service: "web", XDSSocket: "/run/kuma-dp/xds.sock", AdminSocket: "/run/kuma-dp/envoy-admin.sock"}},
		{"admin-tcp", Config{Mesh: "prod", Name: "redis-1", Service: "redis", XDSSocket: "/run/kuma-dp/xds.sock", AdminAddress: "127.0.0.1:9901"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bootstrap.json")
			if err := Write(path, c.cfg); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", st.Mode().Perm())
			}
			data, _ := os.ReadFile(path)
			// It reads back as a valid Envoy v3 bootstrap (unknown fields would fail here).
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(data, &b); err != nil {
				t.Fatalf("does not parse as a bootstrap: %v", err)
			}
			if err := xds.ValidateMessage(&b); err != nil {
				t.Fatalf("read-back bootstrap invalid: %v", err)
			}
			mesh := c.cfg.Mesh
			if b.Node.Id != mesh+"."+c.cfg.Name || b.Node.Cluster != c.cfg.Service {
				t.Errorf("node = %v", b.Node)
			}
			if b.DynamicResources.AdsConfig.ApiType.String() != "DELTA_GRPC" {
				t.Errorf("ADS api type %v", b.DynamicResources.AdsConfig.ApiType)
			}
			// Golden: re-encoded through encoding/json so protojson's whitespace does not matter.
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(v, "", "  ")
			got = append(got, '\n')
			golden := filepath.Join("testdata", c.name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (rerun with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs; rerun with -update if intended:\n%s", golden, got)
			}
		})
	}
}

func TestWriteRejects(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 120)
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no name", Config{XDSSocket: "/x.sock", AdminSocket: "/a.sock"}, "name: required"},
		{"no xds socket", Config{Name: "a", AdminSocket: "/a.sock"}, "xds socket: required"},
		{"no admin", Config{Name: "a", XDSSocket: "/x.sock"}, "admin"},
		{"socket too long", Config{Name: "a", XDSSocket: long, AdminSocket: "/a.sock"}, "unix sockets allow 107"},
		{"admin not loopback", Config{Name: "a", XDSSocket: "/x.sock", AdminAddress: "0.0.0.0:9901"}, "must be a loopback IP"},
		{"admin bad port", Config{Name: "a", XDSSocket: "/x.sock", AdminAddress: "127.0.0.1:99999"}, "port"},
		// Envoy would bind its admin API where kuma-dp serves xDS: it fails to start, again and again.
		{"admin socket is the xds socket", Config{Name: "a", XDSSocket: "/run/kuma/x.sock", AdminSocket: "/run/kuma/./x.sock"},
			`admin socket: the xds socket's path (value "/run/kuma/./x.sock")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.json")
			err := Write(path, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
				t.Error("a file was written for an invalid config")
			}
		})
	}
}
