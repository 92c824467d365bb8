package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/certs"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Every command that talks to etcd takes serve's TLS flags: kuma-cp zones reads an etcd
// serving TLS with --etcd-ca-file (it had no such flag), and without the CA it and serve fail
// at once naming the certificate's problem and the flag (zones used to fail after 5 s with
// "context deadline exceeded", the x509 cause hidden in a log line).
func TestEtcdTLSFlags(t *testing.T) {
	dir := t.TempDir()
	if err := certs.Write(dir, []string{"localhost", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, certs.CACertFile)
	c := etcdtest.StartTLS(t, 1, etcdtest.TLS{CertFile: filepath.Join(dir, certs.TLSCertFile), KeyFile: filepath.Join(dir, certs.TLSKeyFile), CAFile: ca})
	st := cpstore.NewEtcd(c.Client(), "/kuma")
	router := []byte("type: Router\nname: shard1\ndns: shard1.apps.example.com\n")
	if _, err := st.Put(context.Background(), cpstore.Key{Mesh: "default", Type: "Router", Name: "shard1"}, router, 0); err != nil {
		t.Fatal(err)
	}
	ep := c.Endpoints()[0]
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := dispatch(args, &out, &errb)
		return rc, out.String(), errb.String()
	}
	if rc, out, errs := run("zones", "--etcd-endpoints", ep, "--etcd-ca-file", ca); rc != exitOK || !strings.Contains(out, "shard1.apps.example.com.") {
		t.Fatalf("zones with --etcd-ca-file: exit %d\n%s%s", rc, out, errs)
	}
	if rc, out, errs := run("zones", "--etcd-endpoints", ep); rc != exitFail || !strings.Contains(errs, "x509") || !strings.Contains(errs, "--etcd-ca-file") {
		t.Errorf("zones without the CA: exit %d, want 1 naming the x509 problem and --etcd-ca-file\n%s%s", rc, out, errs)
	}
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, out, errs := run("serve", "--store", "etcd", "--etcd-endpoints", ep, "--admin-token-file", token,
		"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "")
	if rc != exitFail || !strings.Contains(errs, "x509") || !strings.Contains(errs, "--etcd-ca-file") {
		t.Errorf("serve without the CA: exit %d, want 1 naming the x509 problem and --etcd-ca-file\n%s%s", rc, out, errs)
	}
}

// kuma-cp zones takes serve's etcd user flags: against an etcd with authentication on, it
// reads as the user given (--etcd-username, --etcd-password-file) and is refused without.
func TestEtcdAuthFlags(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cl := c.Client()
	ctx := context.Background()
	if _, err := cpstore.NewEtcd(cl, "/kuma").Put(ctx, cpstore.Key{Mesh: "default", Type: "Router", Name: "shard1"},
		[]byte("type: Router\nname: shard1\ndns: shard1.apps.example.com\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "etcd.password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ep := c.Endpoints()[0]
	var out, errb bytes.Buffer
	if rc := dispatch([]string{"zones", "--etcd-endpoints", ep, "--etcd-username", "root", "--etcd-password-file", pw}, &out, &errb); rc != exitOK || !strings.Contains(out.String(), "shard1.apps.example.com.") {
		t.Fatalf("zones as root: exit %d\n%s%s", rc, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if rc := dispatch([]string{"zones", "--etcd-endpoints", ep}, &out, &errb); rc != exitFail {
		t.Errorf("zones without a user against etcd with auth on: exit %d, want 1\n%s%s", rc, out.String(), errb.String())
	}
}
