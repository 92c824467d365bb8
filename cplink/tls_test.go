package cplink

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// tlsCP serves a fake control plane over TLS with a certificate for hosts, valid from
// notBefore to notAfter, signed by a CA it writes to a file (returned).
func tlsCP(t *testing.T, hosts []string, notBefore, notAfter time.Time) (addr, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, discovery.UnimplementedAggregatedDiscoveryServiceServer{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String(), caFile
}

// A control plane whose certificate expired, or names another host: the link's error line
// says which, and what to do - it said "not trusted; check --ca-cert-file" for both, while
// the CA file was right.
func TestClientTLSFailuresNamed(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		hosts     []string
		from, to  time.Time
		want, not string
	}{
		{"expired", []string{"127.0.0.1"}, now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), "has expired or is not yet valid", "check --ca-cert-file"},
		{"another host", []string{"cp.example"}, now.Add(-time.Hour), now.Add(time.Hour), "does not name", "check --ca-cert-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ca := tlsCP(t, tc.hosts, tc.from, tc.to)
			var logs testutil.LockedBuffer
			c, err := NewClient(ClientConfig{Address: "grpcs://" + addr, CACertFile: ca, Name: "web-1", Backoff: 10 * time.Millisecond},
				slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				deadline := time.Now().Add(10 * time.Second)
				for !strings.Contains(logs.String(), "level=ERROR") && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			c.Load(ctx)
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=ERROR") {
					line = l
					break
				}
			}
			if !strings.Contains(line, tc.want) || strings.Contains(line, tc.not) {
				t.Errorf("error line %q: want %q, not %q", line, tc.want, tc.not)
			}
		})
	}
}

// The token file deleted or emptied (a rotation gone wrong): the error line says so and
// names the file, not "control plane link down"; a token written again is picked up.
func TestClientTokenFileProblemsNamed(t *testing.T) {
	cp, addr := newFakeCP(t, testDataplane("web-1", "web", "10.0.0.1"))
	token := filepath.Join(t.TempDir(), "web-1.token")
	var logs testutil.LockedBuffer
	c, err := NewClient(ClientConfig{Address: "grpc://" + addr, Name: "web-1", TokenFile: token, Backoff: 10 * time.Millisecond},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		for !strings.Contains(logs.String(), "level=ERROR") && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		_ = os.WriteFile(token, []byte("rotated\n"), 0o600)
	}()
	if u := c.Load(ctx); u.Err != nil {
		t.Fatalf("no model once the token is back: %v", u.Err)
	}
	cancel()
	_ = c.Run(ctx, make(chan Update, 1))
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			line = l
			break
		}
	}
	if !strings.Contains(line, "dataplane token") || !strings.Contains(line, token) || strings.Contains(line, "link down") {
		t.Errorf("error line: %q", line)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.tokens) == 0 || cp.tokens[len(cp.tokens)-1] != "Bearer rotated" {
		t.Errorf("tokens sent: %q", cp.tokens)
	}
}
