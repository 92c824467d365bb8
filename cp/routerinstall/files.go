package routerinstall

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/token"
)

// Credentials reads what the replicas' files need from the control plane's: its CA (PEM),
// and its token key, with which each replica's token is issued (valid for validFor; 0: no
// expiry). An error names the flag and the file.
func Credentials(caFile, keyFile, meshName string, validFor time.Duration) (string, func(string) string, error) {
	if caFile == "" {
		return "", nil, fmt.Errorf("--ca-cert-file: required: the control plane's CA, which the replicas' agents trust")
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", nil, fmt.Errorf("--ca-cert-file %q: %v", caFile, err)
	}
	if !strings.Contains(string(ca), "BEGIN CERTIFICATE") {
		return "", nil, fmt.Errorf("--ca-cert-file %q: no PEM certificate in it", caFile)
	}
	if keyFile == "" {
		return "", nil, fmt.Errorf("--token-key-file: required: the replicas' tokens are issued with the control plane's key")
	}
	key, err := token.ReadKey(keyFile)
	if err != nil {
		return "", nil, err
	}
	var expires int64
	if validFor > 0 {
		expires = time.Now().Add(validFor).Unix()
	}
	return string(ca), func(name string) string {
		return token.Issue(key, token.Identity{Name: name, Mesh: meshName, Expires: expires})
	}, nil
}

// WriteSystemd writes Systemd's files into dir, each with its mode, naming each on out.
func WriteSystemd(o Options, dir string, out io.Writer) error {
	files, err := Systemd(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out-dir %q: %w", dir, err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, []byte(f.Body), os.FileMode(f.Mode)); err != nil {
			return fmt.Errorf("--out-dir %q: %w", dir, err)
		}
		if err := os.Chmod(p, os.FileMode(f.Mode)); err != nil { // a file there before keeps its mode otherwise
			return fmt.Errorf("--out-dir %q: %w", dir, err)
		}
		fmt.Fprintln(out, p)
	}
	return nil
}
