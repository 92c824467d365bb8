package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The control-plane settings: flags, variables and the checks that name them. The link
// itself is exercised end to end with the real kuma-cp in cmd/kuma-cp/e2e_test.go.
func TestRunControlPlaneSettings(t *testing.T) {
	t.Run("flags and environment", func(t *testing.T) {
		var out, errb bytes.Buffer
		cfg, code, done := parseRunConfig([]string{"--cp-address", "grpcs://cp:5678", "--name", "web-1",
			"--ca-cert-file", "ca.crt", "--cp-keepalive-interval", "2s"},
			envOf(map[string]string{"KUMA_DATAPLANE_RUNTIME_TOKEN_PATH": "web.token", "KUMA_CONTROL_PLANE_RETRY_BACKOFF": "1s"}), &out, &errb)
		if done || code != exitOK {
			t.Fatalf("refused (%d): %s", code, errb.String())
		}
		c := cfg.ControlPlane
		if c.URL != "grpcs://cp:5678" || c.CACertFile != "ca.crt" || cfg.Runtime.TokenPath != "web.token" ||
			time.Duration(c.RetryBackoff) != time.Second || time.Duration(c.KeepaliveInterval) != 2*time.Second {
			t.Errorf("config: %+v, token %q", c, cfg.Runtime.TokenPath)
		}
	})
	bad := []struct {
		name string
		args []string
		want []string
	}{
		{"no identity", []string{"--cp-address", "grpcs://cp:5678"}, []string{"--name", "dataplane.name", "required"}},
		{"both sources", []string{"--cp-address", "grpcs://cp:5678", "--name", "web-1", "--policies-dir", "p"},
			[]string{"--policies-dir", "controlPlane.url"}},
		{"negative backoff", []string{"--cp-address", "grpcs://cp:5678", "--name", "web-1", "--cp-retry-backoff", "-1s"},
			[]string{"--cp-retry-backoff", "-1s"}},
		{"neither files nor control plane", nil, []string{"--dataplane-file", "controlPlane.url"}},
		// A keepalive every millisecond waits a millisecond for each answer: a healthy
		// control plane answering slower than that was dropped again and again.
		{"keepalive too short", []string{"--cp-address", "grpcs://cp:5678", "--name", "web-1", "--cp-keepalive-interval", "1ms"},
			[]string{"--cp-keepalive-interval", "controlPlane.keepaliveInterval", "1ms", "100ms"}},
		// A first wait above the cap: one failure left the agent without its control plane
		// for days (63h after --cp-retry-backoff 100h).
		{"backoff above its cap", []string{"--cp-address", "grpcs://cp:5678", "--name", "web-1", "--cp-retry-backoff", "100h"},
			[]string{"--cp-retry-backoff", "100h", "30s"}},
		// A bad address is refused with the usage errors, naming the setting and the value
		// given (it failed later, after the work dir was made, naming an empty address "").
		{"address with an empty replica", []string{"--cp-address", "grpc://cp:1,", "--name", "web-1"},
			[]string{"--cp-address", "KUMA_CONTROL_PLANE_URL", `"grpc://cp:1,"`, "replica 2 of 2", "empty"}},
		{"address with a path", []string{"--cp-address", "grpcs://cp:5678/xds", "--name", "web-1"},
			[]string{"--cp-address", "no path expected"}},
		// A value with a line break added lines to the dataplane file: fields of its own, or
		// a YAML error that named neither the variable nor the setting.
		{"dataplane var with a line break", []string{"--dataplane-file", "dp.yaml", "--policies-dir", "p", "--dataplane-var", "name=web\n  x: 1"},
			[]string{"--dataplane-var", "dataplaneRuntime.resourceVars", "line break"}},
		{"address mixing TLS and plain text", []string{"--cp-address", "grpcs://cp-0:5678,grpc://cp-1:5678", "--name", "web-1"},
			[]string{"--cp-address", "not a mix"}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			_, code, done := parseRunConfig(c.args, envOf(nil), &out, &errb)
			if !done || code != exitUsage {
				t.Fatalf("accepted (%d)", code)
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("message does not name %q: %s", w, errb.String())
				}
			}
		})
	}
}

// --help shows the control-plane example.
func TestRunHelpShowsControlPlaneExample(t *testing.T) {
	var out, errb bytes.Buffer
	if _, code, _ := parseRunConfig([]string{"--help"}, envOf(nil), &out, &errb); code != exitOK {
		t.Fatal(code)
	}
	for _, w := range []string{"--cp-address grpcs://127.0.0.1:5678", "--dataplane-token-file", "KUMA_CONTROL_PLANE_URL"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q", w)
		}
	}
}
