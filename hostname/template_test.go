package hostname

import (
	"github.com/kumadp/kuma-dp/tagset"

	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

func TestVirtualOutboundTemplateSyntaxes(t *testing.T) {
	tags := tagset.Of(map[string]string{ServiceTag: "Backend", "version": "v1", ZoneTag: "zone-1", "port": "8081"})
	tests := []struct {
		name     string
		conf     VirtualOutboundConf
		wantKeys []string
		wantHost string
		wantPort uint32
		wantFast bool
	}{
		{
			name:     "the VirtualOutbound design literal host",
			conf:     VirtualOutboundConf{Host: "httpbin.mesh", Port: "8080"},
			wantKeys: []string{},
			wantHost: "httpbin.mesh", wantPort: 8080, wantFast: true,
		},
		{
			name: "the VirtualOutbound design functions from conf.tags",
			conf: VirtualOutboundConf{Host: "{{version}}.{{service}}.mesh", Port: "8080",
				Tags: map[string]string{ServiceTag: "service", "version": "version"}},
			wantKeys: []string{ServiceTag, "version"},
			wantHost: "v1.backend.mesh", wantPort: 8080, wantFast: true,
		},
		{
			name: "the VirtualOutbound design by zone",
			conf: VirtualOutboundConf{Host: "{{service}}.{{zone}}.mesh", Port: "80",
				Tags: map[string]string{ServiceTag: "service", ZoneTag: "zone"}},
			wantKeys: []string{ServiceTag, ZoneTag},
			wantHost: "backend.zone-1.mesh", wantPort: 80, wantFast: true,
		},
		{
			name: "kuma parameters with data keys",
			conf: VirtualOutboundConf{Host: "{{.service}}.{{.version}}", Port: "{{.port}}",
				Parameters: []Parameter{{Name: "service", TagKey: ServiceTag}, {Name: "version"}, {Name: "port"}}},
			wantKeys: []string{ServiceTag, "port", "version"},
			wantHost: "backend.v1", wantPort: 8081, wantFast: true,
		},
		{
			name:     "the VirtualHost draft quoted tag",
			conf:     VirtualOutboundConf{Host: `{{tag "version"}}.{{tag "kuma.io/service"}}.mesh`, Port: "8080"},
			wantKeys: []string{ServiceTag, "version"},
			wantHost: "v1.backend.mesh", wantPort: 8080, wantFast: true,
		},
		{
			name:     "the VirtualHost draft unquoted tag",
			conf:     VirtualOutboundConf{Host: "{{tag version}}.{{tag kuma.io/service}}.mesh", Port: "8080"},
			wantKeys: []string{ServiceTag, "version"},
			wantHost: "v1.backend.mesh", wantPort: 8080, wantFast: true,
		},
		{
			name:     "the VirtualHost draft bare tag key",
			conf:     VirtualOutboundConf{Host: "{{tag kuma.io/service}}.{{kuma.io/zone}}.mesh", Port: "80"},
			wantKeys: []string{ServiceTag, ZoneTag},
			wantHost: "backend.zone-1.mesh", wantPort: 80, wantFast: true,
		},
		{
			name:     "trim markers and spaces",
			conf:     VirtualOutboundConf{Host: "{{- tag version -}} . {{- kuma.io/service }}.mesh.", Port: " 80 "},
			wantKeys: []string{ServiceTag, "version"},
			wantHost: "v1.backend.mesh", wantPort: 80, wantFast: true,
		},
		{
			name: "rich template falls back to text/template",
			conf: VirtualOutboundConf{Host: `{{if eq .version "v1"}}stable{{else}}{{.version}}{{end}}.{{service | printf "%s"}}.mesh`,
				Port: `{{printf "%s" (tag "port")}}`,
				Tags: map[string]string{ServiceTag: "service"}, Parameters: []Parameter{{Name: "version"}}},
			wantKeys: []string{ServiceTag, "port", "version"},
			wantHost: "stable.backend.mesh", wantPort: 8081, wantFast: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vt, err := CompileVirtualOutbound(tt.conf)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if got := vt.TagKeys(); !reflect.DeepEqual(got, tt.wantKeys) {
				t.Errorf("TagKeys = %q, want %q", got, tt.wantKeys)
			}
			if vt.host.fast != tt.wantFast {
				t.Errorf("fast path = %v, want %v", vt.host.fast, tt.wantFast)
			}
			host, port, err := vt.Render(tags)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if host != tt.wantHost || port != tt.wantPort {
				t.Errorf("Render = %q:%d, want %q:%d", host, port, tt.wantHost, tt.wantPort)
			}
		})
	}
}

func TestVirtualOutboundTemplateCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		conf VirtualOutboundConf
		want string
	}{
		{"undefined function", VirtualOutboundConf{Host: "{{mesh}}.x", Port: "80"},
			`conf.host: template: function "mesh" not defined`},
		{"unclosed action", VirtualOutboundConf{Host: "{{.service", Port: "80", Parameters: []Parameter{{Name: "service"}}},
			`conf.host: template: unclosed action`},
		{"unknown data key", VirtualOutboundConf{Host: "{{.svc}}.mesh", Port: "80", Parameters: []Parameter{{Name: "service"}}},
			`conf.host: template: no variable "svc" (declare it in conf.parameters or conf.tags)`},
		{"empty host", VirtualOutboundConf{Host: " ", Port: "80"}, `conf.host: template: empty`},
		{"empty port", VirtualOutboundConf{Host: "a", Port: ""}, `conf.port: template: empty`},
		{"port out of range", VirtualOutboundConf{Host: "a", Port: "70000"}, `conf.port: template: port must be 1-65535`},
		{"port zero", VirtualOutboundConf{Host: "a", Port: "0"}, `conf.port: template: port must be 1-65535`},
		{"port template function", VirtualOutboundConf{Host: "a", Port: "{{port}}"},
			`conf.port: template: function "port" not defined`},
		{"empty tag name", VirtualOutboundConf{Host: "a", Port: "80", Tags: map[string]string{"version": ""}},
			`conf.tags: template: tag "version" maps to an empty name`},
		{"name mapped twice", VirtualOutboundConf{Host: "a", Port: "80", Tags: map[string]string{"a": "x", "b": "x"}},
			`conf.tags: template: name "x" maps both "a" and "b"`},
		{"range refused", VirtualOutboundConf{Host: "{{range 1000000000}}x{{end}}", Port: "80"},
			`conf.host: template: range is not supported`},
		{"define refused", VirtualOutboundConf{Host: `{{define "a"}}x{{end}}a`, Port: "80"},
			`conf.host: template: define and block are not supported`},
		{"template call refused", VirtualOutboundConf{Host: `{{template "conf.host"}}`, Port: "80"},
			`conf.host: template: template is not supported`},
		{"host and port both reported", VirtualOutboundConf{Host: "{{mesh}}", Port: "{{port}}"},
			"conf.host: template: function \"mesh\" not defined\nconf.port: template: function \"port\" not defined"},
		{"parameter without name", VirtualOutboundConf{Host: "a", Port: "80", Parameters: []Parameter{{TagKey: "x"}}},
			`conf.parameters[0].name: template: name "" must consist of letters and digits only (as in Kuma)`},
		// Kuma's validator cases: a name that is not alphanumeric, a tag key with other characters
		{"parameter named _", VirtualOutboundConf{Host: "a", Port: "80", Parameters: []Parameter{{Name: "_", TagKey: "kuma.io/service"}}},
			`conf.parameters[0].name: template: name "_" must consist of letters and digits only (as in Kuma)`},
		{"parameter named like a tag", VirtualOutboundConf{Host: "a", Port: "80", Parameters: []Parameter{{Name: "kuma.io/port"}}},
			`conf.parameters[0].name: template: name "kuma.io/port" must consist of letters and digits only (as in Kuma)`},
		{"tagKey ***", VirtualOutboundConf{Host: "a", Port: "80", Parameters: []Parameter{{Name: "port", TagKey: "***"}}},
			`conf.parameters[0].tagKey: template: tagKey "***" is not a valid tag key (letters, digits and . - _ : / only, as in Kuma)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileVirtualOutbound(tt.conf)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Errorf("error %T is not a *TemplateError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %q\nwant %q", err.Error(), tt.want)
			}
		})
	}
}

func TestVirtualOutboundTemplateRenderErrors(t *testing.T) {
	tests := []struct {
		name string
		conf VirtualOutboundConf
		tags Tags
		want string
	}{
		{"missing tag fast", VirtualOutboundConf{Host: "{{version}}.{{service}}", Port: "80",
			Tags: map[string]string{ServiceTag: "service", "version": "version"}},
			tagset.Of(map[string]string{ServiceTag: "a"}), `conf.host: tag "version" is missing`},
		{"missing tag slow", VirtualOutboundConf{Host: `{{printf "%s" (tag "version")}}`, Port: "80"},
			tagset.Of(map[string]string{ServiceTag: "a"}), `conf.host: tag "version" is missing`},
		{"missing port tag", VirtualOutboundConf{Host: "a", Port: "{{.port}}", Parameters: []Parameter{{Name: "port"}}},
			Tags{}, `conf.port: tag "port" is missing`},
		{"invalid character", VirtualOutboundConf{Host: "{{tag \"x\"}}.mesh", Port: "80"},
			tagset.Of(map[string]string{"x": "a b"}), `conf.host: rendered "a b.mesh": character ' ' not allowed in a hostname`},
		{"empty label", VirtualOutboundConf{Host: "{{tag \"x\"}}.mesh", Port: "80"},
			tagset.Of(map[string]string{"x": ""}), `conf.host: rendered ".mesh": empty label`},
		{"port not a number", VirtualOutboundConf{Host: "a", Port: `{{tag "p"}}`},
			tagset.Of(map[string]string{"p": "http"}), `conf.port: rendered "http": not a port 1-65535`},
		{"printf width refused", VirtualOutboundConf{Host: `{{printf "%0999999999d" 1}}`, Port: "80"},
			Tags{}, `conf.host: template: error calling printf: printf: width or precision too large in "%0999999999d"`},
		{"port too big", VirtualOutboundConf{Host: "a", Port: `{{tag "p"}}`},
			tagset.Of(map[string]string{"p": "65536"}), `conf.port: rendered "65536": not a port 1-65535`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vt, err := CompileVirtualOutbound(tt.conf)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			_, _, err = vt.Render(tt.tags)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Render error = %v, want %q", err, tt.want)
			}
		})
	}
	vt, _ := CompileVirtualOutbound(VirtualOutboundConf{Host: `{{tag "version"}}`, Port: "80"})
	_, _, err := vt.Render(Tags{})
	var mt *MissingTagError
	if !errors.As(err, &mt) || mt.Key != "version" {
		t.Errorf("missing tag error = %#v, want *MissingTagError for version", err)
	}
}

func TestHostnameGeneratorTemplate(t *testing.T) {
	d := HGData{Name: "MyDomain", Mesh: "default", Zone: "east-1",
		Labels: map[string]string{"my-service.io/access": "true", "team": "payments"}}
	tests := []struct {
		name, tpl, want string
		fast            bool
	}{
		{"the MeshExternalService design name", "{{ name }}.svc.meshext.local", "mydomain.svc.meshext.local", true},
		{"label", `{{ label "team" }}.{{ name }}.ext`, "payments.mydomain.ext", true},
		{"bare label", `{{ label team }}.ext`, "payments.ext", true},
		{"fields", "{{ .Name }}.{{ .DisplayName }}.{{ .Mesh }}.{{ .Zone }}", "mydomain.mydomain.default.east-1", true},
		{"labels map", "{{ .Labels.team }}.x", "payments.x", true},
		{"rich", `{{ if eq .Zone "east-1" }}e{{ else }}w{{ end }}.{{ name | printf "%s" }}`, "e.mydomain", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ht, err := CompileHostnameGenerator(tt.tpl)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if ht.t.fast != tt.fast {
				t.Errorf("fast = %v, want %v", ht.t.fast, tt.fast)
			}
			got, err := ht.Render(d)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHostnameGeneratorTemplateErrors(t *testing.T) {
	compileErrs := []struct{ tpl, want string }{
		{"", "spec.template: template: empty"},
		{"{{ zone }}.x", `spec.template: template: function "zone" not defined`},
		{"{{ .Cluster }}.x", `spec.template: template: no field "Cluster" (use .Name, .DisplayName, .Mesh, .Zone, .Namespace, name or label "x")`},
		{"{{ name ", "spec.template: template: unclosed action"},
	}
	for _, tt := range compileErrs {
		_, err := CompileHostnameGenerator(tt.tpl)
		if err == nil || err.Error() != tt.want {
			t.Errorf("CompileHostnameGenerator(%q) = %v, want %q", tt.tpl, err, tt.want)
		}
	}
	for _, tpl := range []string{`{{ label "region" }}.x`, `{{ label "region" | printf "%s" }}.x`, `{{ .Labels.region }}.x`} {
		ht, err := CompileHostnameGenerator(tpl)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ht.Render(HGData{Name: "a", Labels: map[string]string{}})
		var ml *MissingLabelError
		if !errors.As(err, &ml) || ml.Label != "region" {
			t.Errorf("%s: Render error = %v, want missing label region", tpl, err)
		}
	}
	ht, _ := CompileHostnameGenerator("{{ .Zone }}.{{ name }}")
	if _, err := ht.Render(HGData{Name: "a"}); err == nil || !strings.Contains(err.Error(), "empty label") {
		t.Errorf("empty zone: error = %v, want empty label", err)
	}
}

func TestValidHostname(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct{ host, err string }{
		{"httpbin.mesh", ""},
		{"a", ""},
		{"backend_v1.svc", ""},
		{"1.2.3", ""},
		{long + ".x", ""},
		{"", "empty hostname"},
		{"a..b", "empty label"},
		{"a.", "empty label"},
		{"-a.b", "label starts or ends with '-'"},
		{"a-.b", "label starts or ends with '-'"},
		{long + "a.x", "label longer than 63 characters"},
		{strings.Repeat(long+".", 4) + "x", "hostname longer than 253 characters"},
		{"Upper.mesh", `character 'U' not allowed in a hostname`},
		{"a/b", `character '/' not allowed in a hostname`},
		// A tag value's non-ASCII character is named as written, not by its first byte.
		{"ünïcode.team.mesh", `character 'ü' not allowed in a hostname`},
		{"a.日本", `character '日' not allowed in a hostname`},
		{"a\xffb", `byte '\xff' (not UTF-8) not allowed in a hostname`},
	}
	for _, tt := range tests {
		err := Valid(tt.host)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.err {
			t.Errorf("Valid(%q) = %q, want %q", tt.host, got, tt.err)
		}
	}
}

func TestRewriteBare(t *testing.T) {
	tests := []struct{ in, want string }{
		{"{{tag version}}", `{{ tag "version" }}`},
		{"{{kuma.io/zone}}.x", `{{ tag "kuma.io/zone" }}.x`},
		{"{{service}}", "{{service}}"},
		{`{{tag "a"}}`, `{{tag "a"}}`},
		{"{{.x}}", "{{.x}}"},
		{"{{1.5}}", "{{1.5}}"},
		{"{{- a.b -}}", `{{- tag "a.b" -}}`},
		{"no actions", "no actions"},
		{"{{ unclosed", "{{ unclosed"},
	}
	for _, tt := range tests {
		if got := rewriteBare(tt.in, "tag"); got != tt.want {
			t.Errorf("rewriteBare(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// doubling returns a template that doubles a string n times through a reassigned variable
// with fn (printf "%s%s", print, ...), then renders it: the memory bomb of a policy.
func doubling(fn string, n int) string {
	var b strings.Builder
	b.WriteString(`{{$x := printf "%s" "ab"}}`)
	for range n {
		b.WriteString("{{$x = " + fn + " $x $x}}")
	}
	b.WriteString("{{$x}}.mesh")
	return b.String()
}

// maxRenderAlloc bounds what one render of any template may allocate.
const maxRenderAlloc = 1 << 20

func TestTemplateRenderIsBounded(t *testing.T) {
	tags := tagset.Of(map[string]string{ServiceTag: "svc"})
	for _, fn := range []string{`printf "%s%s"`, "print", "println", "html", "js", "urlquery", `printf "%s<%s>&"`} {
		src := doubling(fn, 16) // 2^17 bytes unbounded; compiles (under maxTemplateNodes)
		t.Run(fn, func(t *testing.T) {
			vt, err := CompileVirtualOutbound(VirtualOutboundConf{Host: src, Port: "80",
				Parameters: []Parameter{{Name: "service", TagKey: ServiceTag}}})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			var rerr error
			if a := testutil.HeapAllocated(func() { _, _, rerr = vt.Render(tags) }); a > maxRenderAlloc {
				t.Errorf("render allocated %d bytes", a)
			}
			if rerr == nil || !strings.Contains(rerr.Error(), "conf.host") || !strings.Contains(rerr.Error(), "renders more than") {
				t.Fatalf("render error %v, want conf.host refused as too large", rerr)
			}
			ht, err := CompileHostnameGenerator(src)
			if err != nil {
				t.Fatalf("compile hostname generator: %v", err)
			}
			if a := testutil.HeapAllocated(func() { _, rerr = ht.Render(HGData{Name: "n", Mesh: "m"}) }); a > maxRenderAlloc {
				t.Errorf("hostname generator render allocated %d bytes", a)
			}
			if rerr == nil || len(rerr.Error()) > 4*errtext.MaxShown {
				t.Fatalf("hostname generator render error %d bytes: %.300v", len(rerr.Error()), rerr)
			}
		})
	}
}

// A template's size and node count are bounded when it is compiled: a render walks every
// node (no loops), so without a bound a policy of 20,000 nested ifs (320 KB) cost ~5 ms a
// render - 49 s of CPU for a mesh of 10,000 dataplanes, at each change. The designs' and
// Kuma's templates are far below both bounds.
func TestTemplateSizeIsBounded(t *testing.T) {
	params := []Parameter{{Name: "service", TagKey: ServiceTag}, {Name: "port"}}
	nested := func(n int) string {
		return strings.Repeat("{{if .service}}", n) + "x" + strings.Repeat("{{end}}", n) + ".mesh"
	}
	for _, tc := range []struct{ name, src, err string }{
		{"20,000 nested ifs", nested(20000), "conf.host: template: longer than 2048 bytes"},
		{"within the length, too many nodes", nested(40), "conf.host: template: more than 128 nodes (actions, branches, arguments): too complex for a hostname"},
		{"long text", strings.Repeat("a", 2049), "conf.host: template: longer than 2048 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompileVirtualOutbound(VirtualOutboundConf{Host: tc.src, Port: "80", Parameters: params})
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("VirtualOutbound: error %.200v, want %q", err, tc.err)
			}
			hsrc := strings.ReplaceAll(tc.src, ".service", ".Name")
			_, err = CompileHostnameGenerator(hsrc)
			want := strings.Replace(tc.err, "conf.host", "spec.template", 1)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("HostnameGenerator: error %.200v, want %q", err, want)
			}
		})
	}
	// What Kuma and the designs write compiles: their richest forms, several times over.
	for _, src := range []string{
		strings.Repeat(`{{if .port}}{{.port}}{{else}}8080{{end}}`, 4) + ".{{.service}}.mesh",
		`{{ printf "%s-%s" .service .port | lower }}.mesh`,
		nested(15),
	} {
		if _, err := CompileVirtualOutbound(VirtualOutboundConf{Host: src, Port: "{{.port}}", Parameters: params}); err != nil &&
			!strings.Contains(err.Error(), `function "lower" not defined`) {
			t.Errorf("%s: %v", src, err)
		}
	}
}

// The tag keys a VirtualOutbound reads are bounded: each tuple's key spells them all, so
// 3,000 unused parameters made every tuple's key ~150 KB (10,000 dataplanes: 19 s and
// 3.7 GB). Kuma's and the designs' use 1-4.
func TestTemplateTagKeysAreBounded(t *testing.T) {
	params := func(n, keyLen int) []Parameter {
		ps := []Parameter{{Name: "service", TagKey: ServiceTag}}
		for i := 1; i < n; i++ {
			k := fmt.Sprintf("k%d.", i)
			ps = append(ps, Parameter{Name: fmt.Sprintf("p%d", i), TagKey: k + strings.Repeat("x", keyLen-len(k))})
		}
		return ps
	}
	tags := map[string]string{}
	for i := range 17 {
		tags[fmt.Sprintf("tag%d", i)] = fmt.Sprintf("t%d", i)
	}
	for _, tc := range []struct {
		name string
		conf VirtualOutboundConf
		err  string
	}{
		{"3,000 parameters", VirtualOutboundConf{Host: "{{.service}}.mesh", Port: "80", Parameters: params(3000, 40)},
			"conf.parameters: template: the templates read 3000 tag keys: at most 16"},
		{"17 conf.tags", VirtualOutboundConf{Host: "{{t1}}.mesh", Port: "80", Tags: tags},
			"conf.tags: template: the templates read 17 tag keys: at most 16"},
		{"long keys", VirtualOutboundConf{Host: "{{.service}}.mesh", Port: "80", Parameters: params(4, 200)},
			"conf.parameters: template: the tag keys the templates read are 615 bytes together: at most 512"},
	} {
		_, err := CompileVirtualOutbound(tc.conf)
		if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%s: error %.300v, want %q", tc.name, err, tc.err)
		}
	}
	if _, err := CompileVirtualOutbound(VirtualOutboundConf{Host: "{{.service}}.mesh", Port: "80", Parameters: params(16, 32)}); err != nil {
		t.Errorf("16 parameters of 32 bytes: %v", err)
	}
}

// FuzzTemplate compiles and renders any template source: a render either fails or gives a
// valid hostname (and port), and never allocates more than maxRenderAlloc.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"{{service}}.mesh", "{{.service}}", `{{tag "version"}}.x`, "{{tag kuma.io/service}}",
		"{{kuma.io/zone}}", "{{if .service}}a{{end}}", "{{ name }}.svc", `{{ label "x" }}`, "{{", "}}{{",
		doubling(`printf "%s%s"`, 20), doubling("print", 4), doubling("js", 3), `{{$x := "<>"}}{{$x = html $x}}{{$x = js $x}}{{$x}}`} {
		f.Add(s, "80")
	}
	f.Fuzz(func(t *testing.T, host, port string) {
		vt, err := CompileVirtualOutbound(VirtualOutboundConf{Host: host, Port: port,
			Tags:       map[string]string{ServiceTag: "service"},
			Parameters: []Parameter{{Name: "version"}, {Name: "port"}}})
		if err == nil {
			var h string
			var p uint32
			if a := testutil.HeapAllocated(func() {
				h, p, err = vt.Render(tagset.Of(map[string]string{ServiceTag: "svc", "version": "v1", "port": "80", "x": "y"}))
			}); a > maxRenderAlloc {
				t.Fatalf("Render(%q, %q) allocated %d bytes", host, port, a)
			}
			if err == nil && (Valid(h) != nil || p == 0 || p > 65535) {
				t.Fatalf("Render(%q, %q) = %q:%d: not valid", host, port, h, p)
			}
		}
		ht, err := CompileHostnameGenerator(host)
		if err == nil {
			var h string
			if a := testutil.HeapAllocated(func() {
				h, err = ht.Render(HGData{Name: "n", Mesh: "m", Zone: "z", Labels: map[string]string{"x": "y"}})
			}); a > maxRenderAlloc {
				t.Fatalf("Render(%q) allocated %d bytes", host, a)
			}
			if err == nil && Valid(h) != nil {
				t.Fatalf("Render(%q) = %q: not valid", host, h)
			}
		}
	})
}

func BenchmarkVirtualOutboundRender(b *testing.B) {
	vt, err := CompileVirtualOutbound(VirtualOutboundConf{Host: "{{version}}.{{service}}.mesh", Port: "8080",
		Tags: map[string]string{ServiceTag: "service", "version": "version"}})
	if err != nil {
		b.Fatal(err)
	}
	tags := tagset.Of(map[string]string{ServiceTag: "backend", "version": "v1", ZoneTag: "zone-1"})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := vt.Render(tags); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVirtualOutboundRenderTextTemplate renders the same template through
// text/template (the fallback path), the peer the fast path is measured against.
func BenchmarkVirtualOutboundRenderTextTemplate(b *testing.B) {
	vt, err := CompileVirtualOutbound(VirtualOutboundConf{Host: "{{version}}.{{service}}.mesh", Port: "8080",
		Tags: map[string]string{ServiceTag: "service", "version": "version"}})
	if err != nil {
		b.Fatal(err)
	}
	vt.host.fast = false
	tags := tagset.Of(map[string]string{ServiceTag: "backend", "version": "v1", ZoneTag: "zone-1"})
	b.ReportAllocs()
	for b.Loop() {
		if h, _, err := vt.Render(tags); err != nil || h != "v1.backend.mesh" {
			b.Fatal(h, err)
		}
	}
}

func BenchmarkHostnameGeneratorRender(b *testing.B) {
	ht, err := CompileHostnameGenerator(`{{ name }}.{{ label "team" }}.svc.meshext.local`)
	if err != nil {
		b.Fatal(err)
	}
	d := HGData{Name: "mydomain", Labels: map[string]string{"team": "payments"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ht.Render(d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTemplatesConcurrent: compiled templates are shared by every render (run with -race).
func TestTemplatesConcurrent(t *testing.T) {
	fast, _ := CompileVirtualOutbound(VirtualOutboundConf{Host: "{{.service}}.mesh", Port: "80", Parameters: []Parameter{{Name: "service", TagKey: ServiceTag}}})
	slow, _ := CompileVirtualOutbound(VirtualOutboundConf{Host: `{{if .service}}{{.service}}{{end}}.mesh`, Port: "80", Parameters: []Parameter{{Name: "service", TagKey: ServiceTag}}})
	hg, _ := CompileHostnameGenerator(`{{ name | printf "%s" }}.ext`)
	done := make(chan error, 8)
	for i := range 8 {
		go func() {
			svc := "svc" + strconv.Itoa(i)
			for range 200 {
				for _, vt := range []*VOTemplate{fast, slow} {
					if h, _, err := vt.Render(tagset.Of(map[string]string{ServiceTag: svc})); err != nil || h != svc+".mesh" {
						done <- fmt.Errorf("render %q: %v", h, err)
						return
					}
				}
				if h, err := hg.Render(HGData{Name: svc}); err != nil || h != svc+".ext" {
					done <- fmt.Errorf("render %q: %v", h, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
