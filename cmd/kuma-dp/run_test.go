package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/agent"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestRunConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kuma-dp.yaml")
	if err := os.WriteFile(file, []byte(`
dataplane:
  name: from-file
  mesh: file-mesh
  drainTime: 5s
dataplaneRuntime:
  resourcePath: file-dp.yaml
  envoy: false
dns:
  proxyPort: 1111
  upstreams: [10.0.0.1]
  ttl: 10
log:
  format: json
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c agent.Config)
	}{
		{"defaults", []string{"--dataplane-file", "dp.yaml"}, nil, func(t *testing.T, c agent.Config) {
			d := agent.Defaults()
			if c.DNS.ProxyPort != 15053 || c.Admin.Address != "127.0.0.1:9902" || !c.Runtime.Envoy ||
				c.Dataplane.DrainTime != d.Dataplane.DrainTime || c.Log.Format != "text" {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"file over defaults", []string{"--config", file}, nil, func(t *testing.T, c agent.Config) {
			if c.Dataplane.Name != "from-file" || c.DNS.ProxyPort != 1111 || c.Runtime.Envoy ||
				time.Duration(c.Dataplane.DrainTime) != 5*time.Second || time.Duration(c.DNS.TTL) != 10*time.Second ||
				c.Runtime.DataplaneFile != "file-dp.yaml" || c.Log.Format != "json" || c.Admin.Address != "127.0.0.1:9902" {
				t.Errorf("file: %+v", c)
			}
		}},
		{"env over file", []string{"--config", file}, map[string]string{
			"KUMA_DATAPLANE_NAME": "from-env", "KUMA_DNS_PROXY_PORT": "2222", "KUMA_DNS_UPSTREAM": "10.0.0.2,10.0.0.3:5353",
			"KUMA_DATAPLANE_RUNTIME_ENVOY": "true", "KUMA_DATAPLANE_DRAIN_TIME": "7s",
		}, func(t *testing.T, c agent.Config) {
			if c.Dataplane.Name != "from-env" || c.DNS.ProxyPort != 2222 || !c.Runtime.Envoy ||
				strings.Join(c.DNS.Upstreams, " ") != "10.0.0.2 10.0.0.3:5353" || time.Duration(c.Dataplane.DrainTime) != 7*time.Second ||
				c.Dataplane.Mesh != "file-mesh" {
				t.Errorf("env: %+v", c)
			}
		}},
		{"dataplane vars", []string{"--dataplane-file", "dp.yaml", "--dataplane-var", "address=10.0.0.7", "--dataplane-var", "zone=eu"},
			map[string]string{"KUMA_DATAPLANE_RUNTIME_RESOURCE_VARS": "name=from-env"}, func(t *testing.T, c agent.Config) {
				if len(c.Runtime.ResourceVars) != 2 || c.Runtime.ResourceVars["address"] != "10.0.0.7" || c.Runtime.ResourceVars["zone"] != "eu" {
					t.Errorf("vars: %v", c.Runtime.ResourceVars)
				}
			}},
		{"dataplane vars from env", []string{"--dataplane-file", "dp.yaml"},
			map[string]string{"KUMA_DATAPLANE_RUNTIME_RESOURCE_VARS": "name=web-1,address=10.0.0.8"}, func(t *testing.T, c agent.Config) {
				if c.Runtime.ResourceVars["name"] != "web-1" || c.Runtime.ResourceVars["address"] != "10.0.0.8" {
					t.Errorf("vars: %v", c.Runtime.ResourceVars)
				}
			}},
		{"flags over env", []string{"--config", file, "--name", "from-flag", "--dns-proxy-port=0", "--dns-upstream", "10.0.0.9", "--envoy=false"},
			map[string]string{"KUMA_DATAPLANE_NAME": "from-env", "KUMA_DNS_PROXY_PORT": "2222", "KUMA_DNS_UPSTREAM": "10.0.0.2", "KUMA_DATAPLANE_RUNTIME_ENVOY": "true"},
			func(t *testing.T, c agent.Config) {
				if c.Dataplane.Name != "from-flag" || c.DNS.ProxyPort != 0 || c.Runtime.Envoy || strings.Join(c.DNS.Upstreams, " ") != "10.0.0.9" {
					t.Errorf("flags: %+v", c)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			c, code, done := parseRunConfig(tt.args, envOf(tt.env), &out, &errb)
			if done || code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			tt.check(t, c)
		})
	}
}

func TestRunConfigErrors(t *testing.T) {
	write := testutil.TempFiles(t)
	unknown := write("unknown.yaml", "dns:\n  proxyPorts: 1\n")
	badPort := write("port.yaml", "dataplaneRuntime:\n  resourcePath: dp.yaml\ndns:\n  proxyPort: 70000\n")
	typos := write("typos.yaml", "dns:\n  proxyPrt: 15053\ndataplane:\n  workDir: /tmp/x\nadmin:\n  address: [1, 2]\ndataplaneRuntime:\n  envoy: maybe\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown flag", []string{"--dns-port", "1"}, nil, []string{"--dns-port"}},
		{"flag not a number", []string{"--dataplane-file", "dp.yaml", "--dns-proxy-port", "abc"}, nil, []string{"--dns-proxy-port", `"abc"`}},
		{"argument", []string{"--dataplane-file", "dp.yaml", "extra"}, nil, []string{`"extra"`}},
		{"missing dataplane file", nil, nil, []string{"--dataplane-file", "KUMA_DATAPLANE_RUNTIME_RESOURCE_PATH", "required"}},
		{"port range", []string{"--dataplane-file", "dp.yaml", "--dns-proxy-port", "70000"}, nil, []string{"--dns-proxy-port", "dns.proxyPort", `"70000"`}},
		{"admin port range", []string{"--dataplane-file", "dp.yaml", "--admin-address", "127.0.0.1:99999"}, nil, []string{"--admin-address", `"127.0.0.1:99999"`, "0-65535"}},
		{"admin port not a number", []string{"--dataplane-file", "dp.yaml", "--admin-address", "127.0.0.1:http"}, nil, []string{"--admin-address", `"127.0.0.1:http"`}},
		{"readiness port range", []string{"--dataplane-file", "dp.yaml", "--readiness-address", ":65536"}, nil, []string{"--readiness-address", `":65536"`, "0-65535"}},
		{"readiness host not an IP", []string{"--dataplane-file", "dp.yaml", "--readiness-address", "pod.local:9901"}, nil, []string{"--readiness-address", `"pod.local:9901"`}},
		{"admin not loopback", []string{"--dataplane-file", "dp.yaml", "--admin-address", "0.0.0.0:9902"}, nil, []string{"--admin-address", `"0.0.0.0:9902"`, "loopback"}},
		{"var name", []string{"--dataplane-file", "dp.yaml", "--dataplane-var", "1x=y"}, nil, []string{"--dataplane-var", `"1x=y"`}},
		{"ttl under a second", []string{"--dataplane-file", "dp.yaml", "--dns-ttl", "500ms"}, nil, []string{"--dns-ttl", `"500ms"`}},
		{"log format", []string{"--dataplane-file", "dp.yaml", "--log-format", "xml"}, nil, []string{"--log-format", `"xml"`}},
		{"watch mode", []string{"--dataplane-file", "dp.yaml", "--watch", "fanotify"}, nil, []string{"--watch", `"fanotify"`}},
		{"upstream", []string{"--dataplane-file", "dp.yaml", "--dns-upstream", "dns.google"}, nil, []string{"--dns-upstream", `"dns.google"`}},
		{"env not a duration", []string{"--dataplane-file", "dp.yaml"}, map[string]string{"KUMA_DATAPLANE_DRAIN_TIME": "soon"}, []string{"KUMA_DATAPLANE_DRAIN_TIME", `"soon"`, "--drain-time"}},
		{"env not a bool", []string{"--dataplane-file", "dp.yaml"}, map[string]string{"KUMA_DATAPLANE_RUNTIME_ENVOY": "maybe"}, []string{"KUMA_DATAPLANE_RUNTIME_ENVOY", `"maybe"`}},
		{"file unknown field", []string{"--config", unknown}, nil, []string{unknown, "proxyPorts"}},
		{"file missing", []string{"--config", filepath.Join(filepath.Dir(unknown), "nope.yaml")}, nil, []string{"nope.yaml"}},
		{"file bad value", []string{"--config", badPort}, nil, []string{"dns.proxyPort", `"70000"`}},
		{"file errors, all at once", []string{"--config", typos}, nil, []string{
			"dns.proxyPrt (line 2): unknown field, did you mean proxyPort?",
			"dataplane.workDir (line 4): unknown field here: it belongs in dataplaneRuntime.workDir",
			"admin.address (line 6): want a single value, not a list",
			`dataplaneRuntime.envoy (line 8): want true or false (value "maybe")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			_, code, done := parseRunConfig(tt.args, envOf(tt.env), &out, &errb)
			if !done || code != exitUsage {
				t.Fatalf("want exit %d, got %d (done %v)", exitUsage, code, done)
			}
			for _, w := range tt.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var out, errb bytes.Buffer
	_, code, done := parseRunConfig([]string{"--help"}, envOf(nil), &out, &errb)
	if !done || code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies",
		"dig @127.0.0.1 -p 15053 httpbin.mesh", "KUMA_DNS_PROXY_PORT", "--drain-time"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// Every setting has a flag, an environment variable and a config file field that exists in
// the config file format (Define panics on a field it cannot find), and names are unique.
func TestRunOptionsTableIsComplete(t *testing.T) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	runSettings.Define(fs, agent.Defaults())
	seen := map[string]bool{}
	for _, o := range runSettings.Settings {
		if fs.Lookup(o.Flag) == nil {
			t.Errorf("option %q has no flag", o.Flag)
		}
		if !strings.HasPrefix(o.Env, "KUMA_") {
			t.Errorf("option %q: env %q", o.Flag, o.Env)
		}
		for _, name := range []string{o.Flag, o.Env, o.Field} {
			if seen[name] {
				t.Errorf("%q named by two settings", name)
			}
			seen[name] = true
		}
	}
	full := agent.Defaults()
	full.DNS.Addresses, full.DNS.Upstreams = []string{"x"}, []string{"x"}
	full.Dataplane.Name, full.Dataplane.Mesh, full.Runtime.BinaryPath = "x", "x", "x"
	full.Runtime.ReadyFile, full.DNS.CorefileTemplate, full.Admin.ReadinessAddress = "x", "x", "x"
	full.Runtime.ResourceVars = map[string]string{"x": "y"}
	full.Admin.Pprof = true
	b, _ := json.Marshal(full)
	var tree map[string]map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	for _, o := range runSettings.Settings {
		parts := strings.SplitN(o.Field, ".", 2)
		if _, ok := tree[parts[0]][parts[1]]; !ok {
			t.Errorf("option --%s: field %q is not in the config file format", o.Flag, o.Field)
		}
	}
}

// FuzzRunConfigFile feeds arbitrary --config files: each is either refused with a message
// (exit 2) or gives a configuration that validates; never a panic.
func FuzzRunConfigFile(f *testing.F) {
	for _, seed := range []string{
		"dataplaneRuntime:\n  resourcePath: dp.yaml\n",
		"dataplane:\n  drainTime: 5s\ndataplaneRuntime:\n  resourcePath: dp.yaml\ndns:\n  proxyPort: 0\n  upstreams: [10.0.0.1, '[::1]:53']\n",
		"dns:\n  ttl: 30\n  proxyPort: -1\n",
		"dataplane: [1, 2]\n",
		"admin: {address: 0.0.0.0:1}\n",
		"{\"dataplaneRuntime\": {\"dataplaneFile\": \"x\", \"envoy\": \"yes\"}}",
		"&a [*a]",
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		c, code, done := parseRunConfig([]string{"--config", path}, envOf(nil), &out, &errb)
		switch {
		case done && code == exitUsage && errb.Len() > 0:
		case !done && code == exitOK:
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted a config that does not validate: %v", err)
			}
		default:
			t.Fatalf("done %v code %d stderr %q", done, code, errb.String())
		}
	})
}
