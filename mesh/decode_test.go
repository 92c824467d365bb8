package mesh

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// canonical is a resource as generic JSON, the zero creation time left out.
func canonical(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if m, ok := out.(map[string]any); ok && m["creationTime"] == "0001-01-01T00:00:00Z" {
		delete(m, "creationTime")
	}
	return out
}

func TestDecodeForms(t *testing.T) {
	tests := []struct {
		name string
		in   string
		kind string
		want string // the resource as JSON
	}{
		{
			name: "universal dataplane with legacy outbound service",
			in: `
type: Dataplane
mesh: default
name: web-1
creationTime: "2024-01-02T03:04:05Z"
networking:
  address: 10.0.0.1
  inbound:
  - port: 8080
    servicePort: "18080"
    tags: {kuma.io/service: web, version: 2}
  outbound:
  - port: 10001
    service: redis
  - port: 54321
    backendRef: {kind: MeshExternalService, name: ext}
  transparentProxying: {redirectPortInbound: 15006, redirectPortOutbound: 15001}
`,
			kind: KindDataplane,
			want: `{"mesh":"default","name":"web-1","creationTime":"2024-01-02T03:04:05Z","networking":{"address":"10.0.0.1",
				"inbound":[{"port":8080,"servicePort":18080,"tags":{"kuma.io/service":"web","version":"2"}}],
				"outbound":[{"port":10001,"tags":{"kuma.io/service":"redis"}},{"port":54321,"backendRef":{"kind":"MeshExternalService","name":"ext"}}],
				"transparentProxying":{"redirectPortInbound":15006,"redirectPortOutbound":15001}}}`,
		},
		{
			name: "kubernetes dataplane",
			in: `
apiVersion: kuma.io/v1alpha1
kind: Dataplane
mesh: prod
metadata:
  name: pay-1
  namespace: ns
  uid: 1234
  creationTimestamp: "2024-03-01T10:00:00Z"
spec:
  networking:
    address: fd00::1
    inbound:
    - port: 80
      tags: {kuma.io/service: pay_ns_svc_80}
`,
			kind: KindDataplane,
			want: `{"mesh":"prod","name":"pay-1.ns","creationTime":"2024-03-01T10:00:00Z","networking":{"address":"fd00::1",
				"inbound":[{"port":80,"tags":{"kuma.io/service":"pay_ns_svc_80"}}]}}`,
		},
		{
			name: "kubernetes dataplane with kept fields in its spec",
			in: `
apiVersion: kuma.io/v1alpha1
kind: Dataplane
mesh: prod
metadata:
  name: pay-1
  namespace: ns
  creationTimestamp: "2024-03-01T10:00:00Z"
spec:
  probes: {port: 9000}
  networking:
    address: fd00::1
    inbound:
    - port: 80
      tags: {kuma.io/service: pay_ns_svc_80}
`,
			kind: KindDataplane,
			want: `{"mesh":"prod","name":"pay-1.ns","creationTime":"2024-03-01T10:00:00Z","probes":{"port":9000},
				"networking":{"address":"fd00::1","inbound":[{"port":80,"tags":{"kuma.io/service":"pay_ns_svc_80"}}]}}`,
		},
		{
			name: "the VirtualOutbound design selector indentation, mesh defaulted",
			in: `
type: VirtualOutbound
name: by-version
selectors:
  - match:
    kuma.io/service: "*"
    version: "*"
conf:
  host: "{{version}}.{{service}}.mesh"
  port: 8080
  tags:
    "kuma.io/service": service
    "version": version
`,
			kind: KindVirtualOutbound,
			want: `{"mesh":"default","name":"by-version","selectors":[{"match":{"kuma.io/service":"*","version":"*"}}],
				"conf":{"host":"{{version}}.{{service}}.mesh","port":"8080","tags":{"kuma.io/service":"service","version":"version"}}}`,
		},
		{
			name: "kuma parameters, port as a template string",
			in: `
type: VirtualOutbound
mesh: default
name: kuma
selectors: [{match: {kuma.io/service: "*", port: "*"}}]
conf:
  host: "{{.service}}.mesh"
  port: "{{.port}}"
  parameters: [{name: service, tagKey: kuma.io/service}, {name: port}]
`,
			kind: KindVirtualOutbound,
			want: `{"mesh":"default","name":"kuma","selectors":[{"match":{"kuma.io/service":"*","port":"*"}}],
				"conf":{"host":"{{.service}}.mesh","port":"{{.port}}","parameters":[{"name":"service","tagKey":"kuma.io/service"},{"name":"port"}]}}`,
		},
		{
			name: "the VirtualHost draft virtual host",
			in: `
type: VirtualHost
mesh: default
name: by-zone
tags:
  kuma.io/service: "*"
  kuma.io/zone: "*"
host: "{{tag kuma.io/service}}.{{kuma.io/zone}}.mesh"
port: 80
`,
			kind: KindVirtualOutbound,
			want: `{"mesh":"default","name":"by-zone","selectors":[{"match":{"kuma.io/service":"*","kuma.io/zone":"*"}}],
				"conf":{"host":"{{tag kuma.io/service}}.{{kuma.io/zone}}.mesh","port":"80"}}`,
		},
		{
			name: "the L4 TrafficRoute design kubernetes traffic route with legacy service tag",
			in: `
apiVersion: kuma.io/v1alpha1
kind: TrafficRoute
mesh: default
metadata:
  name: rule-name
  namespace: demo-app
spec:
  sources:
  - match:
      service: mobile.mobile-app.svc:8080
      version: 10
  destinations:
  - match:
      service: backend.backend-app.svc:8080
  conf:
  - weight: 90
    destination:
      service: backend
      version: 2
`,
			kind: KindTrafficRoute,
			want: `{"mesh":"default","name":"rule-name","sources":[{"match":{"kuma.io/service":"mobile.mobile-app.svc:8080","version":"10"}}],
				"destinations":[{"match":{"kuma.io/service":"backend.backend-app.svc:8080"}}],
				"conf":[{"weight":90,"destination":{"kuma.io/service":"backend","version":"2"}}]}`,
		},
		{
			name: "the MeshExternalService design mesh external service, status ignored, mesh from label, SkipALL",
			in: `
kind: MeshExternalService
metadata:
  name: example
  namespace: kuma-system
  labels: {kuma.io/mesh: prod}
spec:
  match: {type: HostnameGenerator, port: 80, protocol: http}
  extension:
    type: Lambda
    config: {arn: "arn:aws:lambda"}
  endpoints:
  - address: unix:///run/x.sock
  tls:
    version: {min: TLS12, max: TLS13}
    verification:
      mode: SkipALL
      caCert: {inline: MTIz}
      clientCert: {secret: 123}
      clientKey: {inlineString: key}
status:
  vip: {value: 242.0.0.1, type: Kuma}
`,
			kind: KindMeshExternalService,
			want: `{"mesh":"prod","name":"example","labels":{"k8s.kuma.io/namespace":"kuma-system","kuma.io/env":"kubernetes","kuma.io/mesh":"prod","kuma.io/origin":"zone"},"spec":{"match":{"type":"HostnameGenerator","port":80,"protocol":"http"},
				"extension":{"type":"Lambda","config":{"arn":"arn:aws:lambda"}},"endpoints":[{"address":"unix:///run/x.sock"}],
				"tls":{"version":{"min":"TLS12","max":"TLS13"},"verification":{"mode":"SkipAll","caCert":{"inline":"MTIz"},
				"clientCert":{"secret":"123"},"clientKey":{"inlineString":"key"}}}}}`,
		},
		{
			name: "the MeshExternalService design hostname generator with an unquoted template",
			in: `
kind: HostnameGenerator
metadata:
  name: k8s-meshext-hostnames
spec:
  targetRef:
    kind: MeshExternalService
    tags:
      my-service.io/access: "true"
  template: {{ name }}.svc.meshext.local # a comment
`,
			kind: KindHostnameGenerator,
			want: `{"name":"k8s-meshext-hostnames","spec":{"targetRef":{"kind":"MeshExternalService","tags":{"my-service.io/access":"true"}},
				"template":"{{ name }}.svc.meshext.local"}}`,
		},
		{
			name: "kuma hostname generator selector, universal form",
			in: `
type: HostnameGenerator
name: zone
mesh: default
spec:
  selector:
    meshExternalService:
      matchLabels: {kuma.io/zone: east-1}
  template: '{{ .Name }}.{{ label "kuma.io/zone" }}.mesh'
`,
			kind: KindHostnameGenerator,
			want: `{"mesh":"default","name":"zone","spec":{"targetRef":{"kind":"MeshExternalService","tags":{"kuma.io/zone":"east-1"}},
				"template":"{{ .Name }}.{{ label \"kuma.io/zone\" }}.mesh"}}`,
		},
		{
			name: "json object",
			in:   `{"type":"TrafficRoute","name":"r","sources":[{"match":{"kuma.io/service":"*"}}],"destinations":[{"match":{"kuma.io/service":"b"}}],"conf":[{"weight":1,"destination":{"kuma.io/service":"b"}}]}`,
			kind: KindTrafficRoute,
			want: `{"mesh":"default","name":"r","sources":[{"match":{"kuma.io/service":"*"}}],"destinations":[{"match":{"kuma.io/service":"b"}}],
				"conf":[{"weight":1,"destination":{"kuma.io/service":"b"}}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Decode("f.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(rs) != 1 {
				t.Fatalf("got %d resources, want 1", len(rs))
			}
			if rs[0].Kind() != tt.kind {
				t.Errorf("kind %s, want %s", rs[0].Kind(), tt.kind)
			}
			if src := rs[0].GetMeta().Source.String(); src != "f.yaml#1" {
				t.Errorf("source %q, want f.yaml#1", src)
			}
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if got := canonical(t, rs[0]); !reflect.DeepEqual(got, want) {
				gb, _ := json.Marshal(got)
				t.Errorf("decoded\n got %s\nwant %s", gb, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // every error, in order
	}{
		{
			name: "unknown field with suggestion, and the field it leaves empty",
			in: `type: VirtualOutbound
name: vo
selectors: [{match: {kuma.io/service: "*"}}]
conf: {hosts: x.mesh, port: 80}
`,
			want: []string{
				`f.yaml#1: virtualoutbound "vo": conf.hosts: unknown field, did you mean host?`,
				`f.yaml#1: virtualoutbound "vo": conf.host: template: empty`,
			},
		},
		{
			name: "errors across documents, numbered from 1, empty documents skipped",
			in: `---
# only a comment
---
type: Dataplane
name: dp
networking:
  address: 10.0.0.300
  inbound:
  - port: 0
    tags: {version: v1}
---
type: TrafficRoute
name: tr
sources: []
destinations: [{match: {kuma.io/service: a, version: v1}}]
conf: [{weight: 0, destination: {kuma.io/service: "*", version: "*"}}]
`,
			want: []string{
				`f.yaml#1: dataplane "dp": networking.address: not an IP address (value "10.0.0.300")`,
				`f.yaml#1: dataplane "dp": networking.inbound[0].port: required (1-65535)`,
				`f.yaml#1: dataplane "dp": networking.inbound[0].tags: must contain kuma.io/service`,
				`f.yaml#2: trafficroute "tr": sources: at least one source selector is required`,
				`f.yaml#2: trafficroute "tr": destinations[0].match.version: only kuma.io/service can be used in destinations (value "v1")`,
				`f.yaml#2: trafficroute "tr": conf[0].destination.version: "*" is only allowed as kuma.io/service (the service the connection was for) and in selectors (value "*")`,
				`f.yaml#2: trafficroute "tr": conf: weights add up to 0`,
			},
		},
		{
			name: "wrong types, all reported",
			in: `type: Dataplane
name: dp
networking:
  address: [1]
  inbound:
  - port: eighty
    tags: v1
`,
			want: []string{
				`f.yaml#1: dataplane "dp": networking.address: expected a string, got a list`,
				`f.yaml#1: dataplane "dp": networking.inbound[0].port: expected a whole number 0-4294967295 (value "eighty")`,
				`f.yaml#1: dataplane "dp": networking.inbound[0].tags: expected a mapping, got a string (value "v1")`,
			},
		},
		{
			name: "invalid yaml reports the file line",
			in: `type: Dataplane
name: a
networking: {address: 1.2.3.4, inbound: [{port: 1, tags: {kuma.io/service: a}}]}
---
type: Dataplane
name: b
  bad: indentation
`,
			want: []string{`f.yaml#2: invalid YAML/JSON: yaml: line 7: mapping values are not allowed in this context`},
		},
		{
			name: "duplicate keys",
			in:   "type: Dataplane\nname: a\nname: b\n",
			want: []string{`f.yaml#1: invalid YAML/JSON: yaml: unmarshal errors:
  line 3: key "name" already set in map`},
		},
		{
			name: "alias bombs are refused",
			in: `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
`,
			want: []string{"f.yaml#1: invalid YAML/JSON: yaml: document contains excessive aliasing"},
		},
		{
			name: "type and kind",
			in:   "type: Dataplane\nkind: Dataplane\n",
			want: []string{"f.yaml#1: kind: give `type` (universal form) or `kind` (Kubernetes form), not both"},
		},
		{
			name: "neither type nor kind",
			in:   "name: a\n",
			want: []string{"f.yaml#1: missing `type` (universal form) or `kind` (Kubernetes form)"},
		},
		{
			name: "not a mapping",
			in:   "just text\n",
			want: []string{"f.yaml#1: expected a mapping with `type` (universal) or `kind` (Kubernetes), got a string"},
		},
		{
			name: "unknown kind with suggestion",
			in:   "kind: HostnameGenrator\nmetadata: {name: x}\n",
			want: []string{`f.yaml#1: hostnamegenrator "x": kind: unknown kind, did you mean HostnameGenerator? (value "HostnameGenrator")`},
		},
		{
			name: "kubernetes form: body outside spec, meta inside spec",
			in: `kind: TrafficRoute
metadata: {name: r}
sources: []
spec:
  name: r
  sources: [{match: {kuma.io/service: a}}]
  destinations: [{match: {kuma.io/service: b}}]
  conf: [{weight: 1, destination: {kuma.io/service: b}}]
`,
			want: []string{
				`f.yaml#1: trafficroute "r": sources: unknown field: in the Kubernetes form it goes under spec`,
				`f.yaml#1: trafficroute "r": spec.name: unknown field: in the Kubernetes form it goes in metadata (mesh at the top level)`,
			},
		},
		{
			name: "kubernetes form validation paths",
			in: `kind: VirtualOutbound
metadata: {name: Bad Name}
spec:
  selectors: [{match: {version: "*"}}]
  conf: {host: "{{.v}}", port: 80}
`,
			want: []string{
				`f.yaml#1: virtualoutbound "Bad Name": metadata.name: character ' ' not allowed (use letters, digits, '-', '.', '_') (value "Bad Name")`,
				`f.yaml#1: virtualoutbound "Bad Name": spec.conf.host: template: no variable "v" (declare it in conf.parameters or conf.tags) (value "{{.v}}")`,
			},
		},
		{
			name: "virtual host paths and tags rule",
			in: `type: VirtualHost
name: vh
tags: {version: "*"}
host: "{{tag version}}.{{tag zone}}.mesh"
port: 99999
`,
			want: []string{
				`f.yaml#1: virtualhost "vh": tags: must contain kuma.io/service`,
				`f.yaml#1: virtualhost "vh": port: template: port must be 1-65535 (value "99999")`,
			},
		},
		{
			name: "virtual host using a tag it does not select",
			in: `type: VirtualHost
name: vh
tags: {kuma.io/service: "*"}
host: "{{tag version}}.mesh"
port: 80
`,
			want: []string{`f.yaml#1: virtualhost "vh": host: tag "version" is not in tags (value "{{tag version}}.mesh")`},
		},
		{
			name: "the L4 TrafficRoute design case E: several rules in one route",
			in: `type: TrafficRoute
name: rule-1
rules:
- sources: [{match: {service: mobile}}]
`,
			want: []string{
				`f.yaml#1: trafficroute "rule-1": rules: unknown field: a TrafficRoute holds one rule; write one TrafficRoute per rule`,
				`f.yaml#1: trafficroute "rule-1": sources: at least one source selector is required`,
				`f.yaml#1: trafficroute "rule-1": destinations: at least one destination selector is required`,
				`f.yaml#1: trafficroute "rule-1": conf: at least one weighted destination is required`,
			},
		},
		{
			name: "legacy service conflicts",
			in: `type: TrafficRoute
name: r
sources: [{match: {service: a, kuma.io/service: b}}]
destinations: [{match: {kuma.io/service: b}}]
conf: [{weight: 1, destination: {kuma.io/service: b}}]
`,
			want: []string{`f.yaml#1: trafficroute "r": sources[0].match.service: conflicts with kuma.io/service "b" (service is the legacy name of kuma.io/service) (value "a")`},
		},
		{
			name: "template fixed parts that never make a hostname",
			in: `type: VirtualOutbound
name: vo
selectors: [{match: {kuma.io/service: "*"}}]
conf:
  host: "{{service}}..Mesh!"
  port: "{{service}}"
  tags: {kuma.io/service: service}
`,
			want: []string{`f.yaml#1: virtualoutbound "vo": conf.host: renders an invalid value with stand-in tag values: empty label (value "a1..mesh!")`},
		},
		{
			name: "mesh external service rules",
			in: `kind: MeshExternalService
metadata: {name: m}
spec:
  match: {type: Domain, port: 0, protocol: udp}
  endpoints:
  - address: "bad host!"
    port: 80
  - address: unix://relative.sock
    port: 80
  - address: 10.0.0.1
  tls:
    version: {min: TLS9}
    verification:
      mode: Lax
      subjectAltNames: [{type: Regex, value: ""}]
      caCert: {inline: "!!", secret: s}
      clientCert: {secret: c}
`,
			want: []string{
				`f.yaml#1: meshexternalservice "m": spec.tls.verification.caCert.inline: not base64-encoded text (value "!!")`,
				`f.yaml#1: meshexternalservice "m": spec.match.type: must be HostnameGenerator (value "Domain")`,
				`f.yaml#1: meshexternalservice "m": spec.match.port: required (1-65535)`,
				`f.yaml#1: meshexternalservice "m": spec.match.protocol: must be one of tcp, grpc, http, http2 (value "udp")`,
				`f.yaml#1: meshexternalservice "m": spec.endpoints[0].address: not an IP, a domain (character ' ' not allowed in a hostname) or unix://path (value "bad host!")`,
				`f.yaml#1: meshexternalservice "m": spec.endpoints[1].address: unix socket path must be absolute (unix:///path) or abstract (unix://@name) (value "unix://relative.sock")`,
				`f.yaml#1: meshexternalservice "m": spec.endpoints[1].port: not allowed with a unix socket (value "80")`,
				`f.yaml#1: meshexternalservice "m": spec.endpoints[2].port: required (1-65535)`,
				`f.yaml#1: meshexternalservice "m": spec.tls.version.min: must be one of TLSAuto, TLS10, TLS11, TLS12, TLS13 (value "TLS9")`,
				`f.yaml#1: meshexternalservice "m": spec.tls.verification.mode: must be one of Secured, SkipSAN, SkipCA, SkipAll (value "Lax")`,
				`f.yaml#1: meshexternalservice "m": spec.tls.verification.subjectAltNames[0].type: must be Exact or Prefix (value "Regex")`,
				`f.yaml#1: meshexternalservice "m": spec.tls.verification.subjectAltNames[0].value: required`,
				`f.yaml#1: meshexternalservice "m": spec.tls.verification.clientKey: required with clientCert: clientCert and clientKey go together`,
			},
		},
		{
			name: "mesh external service without endpoints nor extension; hostname generator kind",
			in: `kind: MeshExternalService
metadata: {name: m}
spec:
  match: {type: HostnameGenerator, port: 80}
---
kind: HostnameGenerator
metadata: {name: h}
spec:
  targetRef: {kind: MeshGateway}
  template: "{{ name }}.-x"
`,
			want: []string{
				`f.yaml#1: meshexternalservice "m": spec.endpoints: at least one endpoint is required (unless spec.extension is given)`,
				`f.yaml#2: hostnamegenerator "h": spec.targetRef.kind: must be MeshExternalService or MeshService (MeshMultiZoneService is accepted and selects nothing here) (value "MeshGateway")`,
				`f.yaml#2: hostnamegenerator "h": spec.template: renders an invalid value with stand-in values: label starts or ends with '-' (value "a1.-x")`,
			},
		},
		{
			name: "dataplane outbound rules",
			in: `type: Dataplane
name: dp
networking:
  address: 10.0.0.1
  inbound: [{port: 80, tags: {kuma.io/service: a, zone: ""}}]
  outbound:
  - port: 80
  - port: 80
    tags: {kuma.io/service: b}
    backendRef: {kind: MeshExternalService, name: x}
  - port: 81
    backendRef: {kind: MeshGateway}
  - port: 82
    hostname: x.mesh
    tags: {kuma.io/service: c}
  transparentProxying: {ipFamilyMode: ipv5}
`,
			want: []string{
				`f.yaml#1: dataplane "dp": networking.inbound[0].tags.zone: empty tag value`,
				`f.yaml#1: dataplane "dp": networking.outbound[0]: needs tags with kuma.io/service, or a backendRef`,
				`f.yaml#1: dataplane "dp": networking.outbound[1].port: duplicate outbound 127.0.0.1:80, also networking.outbound[0] (value "80")`,
				`f.yaml#1: dataplane "dp": networking.outbound[1]: give tags or backendRef, not both`,
				`f.yaml#1: dataplane "dp": networking.outbound[2].backendRef.kind: must be MeshService or MeshExternalService (value "MeshGateway")`,
				`f.yaml#1: dataplane "dp": networking.outbound[2].backendRef.name: required`,
				`f.yaml#1: dataplane "dp": networking.outbound[3].hostname: set by the agent from VirtualOutbounds; leave it out (value "x.mesh")`,
				`f.yaml#1: dataplane "dp": networking.transparentProxying.ipFamilyMode: must be dualstack, ipv4 or ipv6 (value "ipv5")`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("f.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors", err)
			}
			got := strings.Split(err.Error(), "\n")
			if len(es) == 1 {
				got = []string{err.Error()}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestDecodeKeepsGoodDocuments: a bad document does not hide the good ones.
func TestDecodeKeepsGoodDocuments(t *testing.T) {
	in := `[
 {"type":"Dataplane","name":"a","networking":{"address":"10.0.0.1","inbound":[{"port":1,"tags":{"kuma.io/service":"a"}}]}},
 {"type":"Dataplane","name":"b","networking":{"address":"x"}},
 {"type":"Dataplane","name":"c","networking":{"address":"10.0.0.3","inbound":[{"port":1,"tags":{"kuma.io/service":"c"}}]}}
]`
	rs, err := Decode("list.json", []byte(in))
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Source != "list.json#2" || es[0].Path != "networking.address" || es[0].Value != "x" {
		t.Fatalf("errors = %#v", err)
	}
	if len(rs) != 2 || rs[0].GetMeta().Name != "a" || rs[1].GetMeta().Name != "c" || rs[1].GetMeta().Source.String() != "list.json#3" {
		t.Fatalf("resources = %v", rs)
	}
}

func TestSplitDocuments(t *testing.T) {
	in := "# header\n---\na: 1\n--- # second\n\n---\nb: 2\r\n---\r\nc: 3\n----\n"
	docs := splitDocuments([]byte(in))
	var got []string
	var lines []int
	for _, d := range docs {
		got = append(got, strings.TrimSpace(string(d.text)))
		lines = append(lines, d.line)
	}
	want := []string{"a: 1", "b: 2", "c: 3\n----"}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(lines, []int{3, 7, 9}) {
		t.Errorf("split = %q at lines %v, want %q at [3 7 9]", got, lines, want)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"conf", "destinations", "host", "port", "selectors", "sources"}
	for key, want := range map[string]string{"hosts": "host", "selector": "selectors", "Port": "port",
		"destination": "destinations", "x": "", "zzzzzzzz": ""} {
		if got := Suggest(key, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", key, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("type: Dataplane\nname: a\nnetworking:\n  address: 1.2.3.4\n  inbound: [{port: 1, tags: {kuma.io/service: a}}]\n"))
	f.Add([]byte("kind: HostnameGenerator\nmetadata: {name: x}\nspec:\n  template: {{ name }}.x\n"))
	f.Add([]byte("type: VirtualHost\nname: v\ntags: {kuma.io/service: '*'}\nhost: '{{tag kuma.io/service}}'\nport: 80\n---\n[1, {a: b}]"))
	f.Add([]byte(`[{"type":"TrafficRoute","name":"r","sources":[{"match":{"service":"a"}}]}]`))
	f.Add([]byte("kind: MeshExternalService\nmetadata: {name: m}\nspec: {match: {type: HostnameGenerator, port: 1}, endpoints: [{address: unix:///x}]}\n"))
	f.Add([]byte("kind: MeshService\nmetadata: {name: s, namespace: n}\nspec: {selector: {dataplaneTags: {app: a}}, ports: [{port: 80, targetPort: {name: http}}]}\n"))
	f.Add([]byte("type: MeshHTTPRoute\nname: r\nspec:\n  to: [{targetRef: {kind: MeshService, name: b}, rules: [{matches: [{path: {type: PathPrefix, value: /a}}], " +
		"default: {filters: [{type: RequestMirror, requestMirror: {percentage: 5, backendRef: {kind: MeshService, name: b}}}]}}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Decode("fuzz.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if !strings.HasPrefix(e.Source, "fuzz.yaml#") {
					t.Fatalf("error without a document: %v", e)
				}
			}
		}
		for _, r := range rs {
			if verr := Validate(r); verr != nil {
				t.Fatalf("decoded resource does not validate: %v", verr)
			}
		}
	})
}

func TestValidateBuiltInCode(t *testing.T) {
	ok := &Dataplane{Meta: Meta{Mesh: "default", Name: "a"}, Networking: Networking{Address: "10.0.0.1",
		Inbound: []Inbound{{Port: 80, Tags: TagsOf(map[string]string{ServiceTag: "a"})}}}}
	if err := Validate(ok); err != nil {
		t.Errorf("valid dataplane: %v", err)
	}
	bad := &HostnameGenerator{Meta: Meta{Name: "h", Source: NewSource("code", 0)}, Spec: HostnameGeneratorSpec{
		TargetRef: TargetRef{Kind: KindMeshExternalService}, Template: "{{ nope }}"}}
	err := Validate(bad)
	want := `code: hostnamegenerator "h": spec.template: template: function "nope" not defined (value "{{ nope }}")`
	if err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %s", err, want)
	}
}

// A document separator is `---` alone or followed by blanks and a comment, as the YAML
// line rule `^---(\s+(#.*)?)?$` says; `...` ends a document by the same rule.
func TestSeparatorLines(t *testing.T) {
	rule := regexp.MustCompile(`^---(\s+(#.*)?)?$`)
	for _, line := range []string{"---", "--- ", "---\t", "--- # web", "---\t#x", "---  \r", "---#x", "--- x",
		"----", "--", "", " ---", "--- # a\r", "---\f", "---\v", "-- -"} {
		if got, want := IsSeparator([]byte(line)), rule.MatchString(line); got != want {
			t.Errorf("IsSeparator(%q) = %v, the YAML rule says %v", line, got, want)
		}
		dots := strings.Replace(line, "---", "...", 1)
		if got, want := markerLine([]byte(dots), []byte("...")), rule.MatchString(line); got != want {
			t.Errorf("markerLine(%q) = %v, want %v", dots, got, want)
		}
	}
}

// A tag key with whitespace is refused, as Kuma refuses it (it split kuma-cp's tables and
// cannot be a template parameter's tag); a character beyond ASCII in a name is named as
// written, not as the first byte of its UTF-8 encoding ('Ã' for 'ä').
func TestTagKeyWhitespaceAndNonASCIINames(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"type: Dataplane\nmesh: default\nname: dp\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: a, \"my\\tteam\": x}\n",
			`networking.inbound[0].tags["my\tteam"]: tag keys cannot contain whitespace`},
		{"type: Dataplane\nmesh: default\nname: dp\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: \"a\\u00a0b\"}\n",
			`tag values cannot contain whitespace`},
		{"type: Dataplane\nmesh: default\nname: bär\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: a}\n",
			`character 'ä' not allowed`},
	} {
		_, err := Decode("f.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
}
