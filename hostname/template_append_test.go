package hostname

import (
	"testing"

	"github.com/kumadp/kuma-dp/tagset"
)

// RenderAppend renders like Render after what dst holds, and leaves dst as it was on error.
func TestVOTemplateRenderAppend(t *testing.T) {
	for _, conf := range []VirtualOutboundConf{
		{Host: "{{.service}}.{{.version}}.MESH.", Port: "{{.port}}", Parameters: []Parameter{
			{Name: "service", TagKey: ServiceTag}, {Name: "version", TagKey: "version"}, {Name: "port", TagKey: "port"}}},
		{Host: `v{{tag "version"}}.mesh`, Port: "8080"},
		{Host: "{{ if .version }}{{.version}}.x{{ end }}.mesh", Port: "80", Parameters: []Parameter{{Name: "version", TagKey: "version"}}},
	} {
		vt, err := CompileVirtualOutbound(conf)
		if err != nil {
			t.Fatal(err)
		}
		for _, tags := range []Tags{
			tagset.FromPairs(ServiceTag, "Backend", "version", "2", "port", "9090"),
			tagset.FromPairs(ServiceTag, "backend", "version", "bad host!", "port", "9090"),
			tagset.FromPairs(ServiceTag, "backend"),
			tagset.FromPairs(ServiceTag, "backend", "version", "2", "port", "99999"),
		} {
			host, port, err := vt.Render(tags)
			prefix := []byte("Key{a=b}")
			out, port2, err2 := vt.RenderAppend(prefix, tags)
			if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
				t.Fatalf("%+v %v: Render error %v, RenderAppend error %v", conf, tags, err, err2)
			}
			if err != nil {
				if string(out) != "Key{a=b}" {
					t.Errorf("%+v %v: on error RenderAppend returned %q", conf, tags, out)
				}
				continue
			}
			if string(out) != "Key{a=b}"+host || port != port2 {
				t.Errorf("%+v %v: RenderAppend %q %d, Render %q %d", conf, tags, out, port2, host, port)
			}
		}
	}
}

// The tag keys the tests use (mesh's well-known keys).
const (
	ServiceTag = "kuma.io/service"
	ZoneTag    = "kuma.io/zone"
)
