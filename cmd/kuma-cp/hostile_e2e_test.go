package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The adversarial campaign's hostile files through a control plane: the template memory bomb
// (a reassigned variable doubled 32 times) and a private key written as PEM where base64 is
// expected. kuma-cp refuses them (or, with --skip-validation, serves them and the agent
// refuses them): nothing crashes, the last good model keeps answering, the field is named,
// and no log carries the template whole or the key at all.

func hostileFiles() map[string]string {
	return map[string]string{
		"bomb.yaml": testutil.BombPolicy(),
		"leak.yaml": testutil.PEMKeyPolicy(),
	}
}

func TestE2EHostileFilesThroughTheControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		// seen: the refusal of both files has been logged (by cp or agent).
		seen func(cp, dp string) bool
	}{
		{"validating", nil, func(cp, _ string) bool {
			return strings.Contains(cp, "bomb.yaml") && strings.Contains(cp, "leak.yaml") && strings.Contains(cp, "conf.host") &&
				strings.Contains(cp, "clientKey")
		}},
		{"--skip-validation", []string{"--skip-validation"}, func(_, dp string) bool {
			return strings.Contains(dp, "conf.host") && strings.Contains(dp, "clientKey")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := meshEnv(t)
			cp := e.start(tc.flags...)
			a := startAgent(t, e, e.address, true, "--name", "web-1", "--dataplane-token-file", e.token("web-1", "default"))
			for name, body := range hostileFiles() {
				e.write(name, body)
			}
			waitFor(t, "both files refused, naming their fields", 10*time.Second, func() bool {
				return tc.seen(cp.Logs.String(), a.Logs.String())
			})
			if !a.answers("v1.httpbin.mesh") {
				t.Fatal("the agent stopped answering its last good model")
			}
			// The control plane still serves: a second agent connects and answers (with
			// --skip-validation a new agent's first model holds the files, which it refuses).
			if tc.flags == nil {
				b := startAgent(t, e, e.address, true, "--name", "httpbin-1", "--dataplane-token-file", e.token("httpbin-1", "default"))
				if !b.answers("v1.httpbin.mesh") {
					t.Fatal("a new agent does not answer after the hostile files")
				}
			} else {
				waitFor(t, "the control plane logs both NACKs", 5*time.Second, func() bool { return cp.Count(`msg="NACK`) >= 2 })
			}
			for who, logs := range map[string]string{"kuma-cp": cp.Logs.String(), "kuma-dp": a.Logs.String()} {
				for _, never := range []string{testutil.BombTail, testutil.SecretMarker} {
					if strings.Contains(logs, never) {
						t.Errorf("%s's log carries %q:\n%.4000s", who, never, logs)
					}
				}
			}
		})
	}
}
