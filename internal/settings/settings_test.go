package settings

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type inner struct {
	Port  int           `json:"port"`
	Wait  time.Duration `json:"wait"`
	Hosts []string      `json:"hosts,omitempty"`
}

type testConfig struct {
	Name   string            `json:"name"`
	On     bool              `json:"on"`
	Skip   bool              `json:"skip"`
	Inner  inner             `json:"inner"`
	Vars   map[string]string `json:"vars,omitempty"`
	Ports  []uint16          `json:"ports,omitempty"`
	Weight uint8             `json:"weight"`
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, errors.New("not a port")
	}
	return uint16(n), nil
}

var testTable = &Table[testConfig]{
	ConfigUsage: "config file",
	Types: map[reflect.Type]func(any) pflag.Value{
		reflect.TypeFor[[]uint16](): func(f any) pflag.Value { return List(f.(*[]uint16), ",", "ports", parsePort) },
		reflect.TypeFor[uint8](): func(f any) pflag.Value {
			return Parsed(f.(*uint8), "weight", func(s string) (uint8, error) {
				n, err := strconv.ParseUint(s, 10, 8)
				return uint8(n), err
			})
		},
	},
	Settings: []Setting[testConfig]{
		{Flag: "name", Short: "n", Env: "T_NAME", Field: "name"},
		{Flag: "on", Env: "T_ON", Field: "on"},
		{Flag: "no-skip", Env: "T_NO_SKIP", Field: "skip", Bind: func(c *testConfig) pflag.Value { return Not(&c.Skip) }},
		{Flag: "port", Env: "T_PORT", Field: "inner.port"},
		{Flag: "wait", Env: "T_WAIT", Field: "inner.wait"},
		{Flag: "host", Env: "T_HOST", Field: "inner.hosts"},
		{Flag: "var", Env: "T_VAR", Field: "vars"},
		{Flag: "ports", Env: "T_PORTS", Field: "ports"},
		{Flag: "weight", Field: "weight"},
	},
}

func load(t *testing.T, file string, env map[string]string, args ...string) (testConfig, error) {
	t.Helper()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	defaults := testConfig{Name: "default", Skip: true, Inner: inner{Port: 1, Hosts: []string{"d"}}}
	flags := testTable.Define(fs, defaults)
	if file != "" {
		args = append(args, "--config", file)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return flags.Load(defaults, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadLayers(t *testing.T) {
	file := writeFile(t, "name: file\ninner:\n  port: 2\n  wait: 3s\n  hosts: [f1, f2]\nports: [7]\nweight: 9\n")
	cases := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want func(c testConfig) bool
	}{
		{"defaults", "", nil, nil, func(c testConfig) bool {
			return c.Name == "default" && c.Inner.Port == 1 && c.Skip && strings.Join(c.Inner.Hosts, ",") == "d"
		}},
		{"file", file, nil, nil, func(c testConfig) bool {
			return c.Name == "file" && c.Inner.Port == 2 && c.Inner.Wait == 3*time.Second && len(c.Inner.Hosts) == 2 && c.Weight == 9
		}},
		{"env over file", file, map[string]string{"T_NAME": "env", "T_HOST": "e1", "T_PORTS": "8,9"}, nil, func(c testConfig) bool {
			return c.Name == "env" && strings.Join(c.Inner.Hosts, ",") == "e1" && len(c.Ports) == 2 && c.Inner.Port == 2
		}},
		{"flag over env, repeated flags add", file, map[string]string{"T_NAME": "env", "T_PORTS": "bad"},
			[]string{"-n", "flag", "--ports", "1", "--ports", "2,3", "--host", "h1", "--host", "h2", "--no-skip", "--var", "a=b"},
			func(c testConfig) bool {
				return c.Name == "flag" && len(c.Ports) == 3 && strings.Join(c.Inner.Hosts, ",") == "h1,h2" && !c.Skip && c.Vars["a"] == "b"
			}},
		{"empty env value sets the field", "", map[string]string{"T_NAME": ""}, nil, func(c testConfig) bool { return c.Name == "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.file, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Errorf("got %+v", c)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := load(t, "", map[string]string{"T_PORT": "x", "T_WAIT": "soon"}, "--ports", "0", "--weight", "300")
	for _, want := range []string{`T_PORT: "x": invalid value for --port`, `T_WAIT: "soon": invalid value for --wait`,
		`--ports: "0": invalid value: not a port`, `--weight: "300"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	failed := Failed(err)
	if !failed["port"] || !failed["wait"] || !failed["ports"] || failed["name"] {
		t.Errorf("Failed = %v", failed)
	}
	_, err = load(t, filepath.Join(t.TempDir(), "none.yaml"), nil)
	var fe *FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestReadFileErrors(t *testing.T) {
	file := writeFile(t, "nme: x\nport: 3\ninner:\n  port: [1]\n  hosts: {a: b}\non: maybe\nweight: 256\nvars: [1]\n")
	var c testConfig
	err := ReadFile(file, &c, nil)
	for _, want := range []string{
		"nme (line 1): unknown field, did you mean name?",
		"port (line 2): unknown field here: it belongs in inner.port",
		"inner.port (line 4): want a single value, not a list",
		"inner.hosts (line 5): want a list",
		`on (line 6): want true or false (value "maybe")`,
		`weight (line 7): want a whole number from 0 to 255 (value "256")`,
		"vars (line 8): want a mapping of names to values",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, body := range []string{"", "name: ok\n"} {
		if err := ReadFile(writeFile(t, body), &c, nil); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	if err := ReadFile(writeFile(t, "[1, 2]\n"), &c, nil); err == nil || !strings.Contains(err.Error(), "the file") {
		t.Errorf("a list for the file: %v", err)
	}
}

func TestReadFileScalars(t *testing.T) {
	scalars := Scalars{reflect.TypeFor[time.Duration](): func(s string) (any, error) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, errors.New("want a duration")
		}
		return int64(d), nil
	}}
	var c testConfig
	if err := ReadFile(writeFile(t, "inner:\n  wait: 2s\n"), &c, scalars); err != nil || c.Inner.Wait != 2*time.Second {
		t.Errorf("wait %v, err %v", c.Inner.Wait, err)
	}
	err := ReadFile(writeFile(t, "inner:\n  wait: soon\n"), &c, scalars)
	if err == nil || !strings.Contains(err.Error(), "inner.wait (line 2): want a duration") {
		t.Errorf("bad scalar: %v", err)
	}
}

func TestEmbedAndSources(t *testing.T) {
	type outer struct {
		Base testConfig
		Mode string `json:"mode"`
	}
	table := &Table[outer]{Settings: []Setting[outer]{
		Embed(testTable, "port", "", func(o *outer) *testConfig { return &o.Base }),
		{Flag: "mode", Env: "T_MODE", Field: "mode"},
	}}
	fs := pflag.NewFlagSet("o", pflag.ContinueOnError)
	flags := table.Define(fs, outer{})
	if err := fs.Parse([]string{"--port", "5"}); err != nil {
		t.Fatal(err)
	}
	o, err := flags.Load(outer{}, func(k string) (string, bool) { return "m", k == "T_MODE" })
	if err != nil || o.Base.Inner.Port != 5 || o.Mode != "m" {
		t.Fatalf("%+v %v", o, err)
	}
	var b strings.Builder
	table.WriteSources(&b)
	if !strings.Contains(b.String(), "--port T_PORT inner.port") {
		t.Errorf("sources:\n%s", b.String())
	}
	if _, ok := table.ByField("mode"); !ok {
		t.Error("ByField")
	}
}
