package bootstrap

import (
	"regexp"
	"testing"
)

var releaseRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+[^/\s]*$`)

// FuzzParseVersion: `envoy --version` output is outside input; any bytes give a release
// number of the expected shape or an error, never a panic.
func FuzzParseVersion(f *testing.F) {
	f.Add([]byte("envoy  version: 6fcb7b0a5cb15d5b3b9b0f0dd0ab4c1e5b4fe2c3/1.34.1/Clean/RELEASE/BoringSSL\n"))
	f.Add([]byte("envoy version: abc/1.31.0-dev/Modified/DEBUG/BoringSSL-FIPS"))
	f.Add([]byte(""))
	f.Add([]byte("version: /1.2.3/"))
	f.Fuzz(func(t *testing.T, out []byte) {
		v, err := parseVersion(out)
		if err == nil && !releaseRE.MatchString(v) {
			t.Fatalf("parseVersion(%q) = %q: not a release number", out, v)
		}
	})
}
