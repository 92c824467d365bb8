package xds

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindCA(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	good := filepath.Join(dir, "bundle.pem")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(good, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	cases := []struct {
		paths []string
		want  string
	}{
		{[]string{filepath.Join(dir, "missing"), empty, good}, good},
		{[]string{dir, empty}, ""}, // a directory and an empty file are not bundles
		{nil, ""},
	}
	for _, c := range cases {
		if got := findCA(c.paths); got != c.want {
			t.Errorf("findCA(%v) = %q, want %q", c.paths, got, c.want)
		}
	}
	// This machine is Debian: the real lookup finds its bundle.
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if got := FindSystemCA(); got != "/etc/ssl/certs/ca-certificates.crt" {
			t.Errorf("FindSystemCA() = %q on Debian", got)
		}
	}
}
