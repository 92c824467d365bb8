// Package etcdtest runs a real etcd cluster for tests: N members of the etcd binary on free
// loopback ports, each killable (SIGKILL) and restartable on its data, or frozen (SIGSTOP),
// a client, and relays in front of members that can stop forwarding (relay.go: a partition
// that closes no connection).
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	Members []*Member
	initial string
	tls     *TLS
}

// TLS is the server certificate of members serving clients over TLS (StartTLS), and the CA
// that signed it (PEM files).
type TLS struct{ CertFile, KeyFile, CAFile string }

// Member is one etcd process.
type Member struct {
	Name              string
	ClientURL, Peer   string
	dir               string
	cmd               *exec.Cmd
	exited            chan struct{}
	logs              *os.File
	initialClusterArg string
}

// Start runs an n-member cluster (election timings shortened, so a lost leader is replaced
// in well under a second) and waits until it is healthy. It skips the test when etcd is not
// installed (scripts/test-deps.sh installs Debian's etcd-server).
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, nil)
}

// StartTLS is Start with the members serving clients over TLS (https:// endpoints) with the
// certificate of tc; peers talk plain HTTP.
func StartTLS(t testing.TB, n int, tc TLS) *Cluster {
	t.Helper()
	return start(t, n, &tc)
}

func start(t testing.TB, n int, tc *TLS) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd not installed (Debian package etcd-server; make test installs it as root)")
	}
	// A port found free can still be taken before etcd binds it (by a process outside these
	// tests: ports used by them are reserved, see reserve); such a start is tried again on
	// new ports.
	for attempt := 1; ; attempt++ {
		c := &Cluster{t: t, bin: bin, tls: tc}
		var peers []string
		for i := range n {
			m := &Member{Name: fmt.Sprintf("e%d", i), dir: t.TempDir()}
			m.ClientURL = "http://" + freeAddr(t)
			if tc != nil {
				m.ClientURL = "https://" + strings.TrimPrefix(m.ClientURL, "http://")
			}
			m.Peer = "http://" + freeAddr(t)
			peers = append(peers, m.Name+"="+m.Peer)
			c.Members = append(c.Members, m)
		}
		c.initial = strings.Join(peers, ",")
		for _, m := range c.Members {
			c.run(m, "new")
		}
		t.Cleanup(func() {
			for _, m := range c.Members {
				m.kill()
			}
		})
		err := c.waitHealthy(c.Members...)
		if err == nil {
			return c
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("etcd cluster start, attempt %d: %v; trying other ports", attempt, err)
		for _, m := range c.Members {
			m.kill()
		}
	}
}

// freeAddr returns a loopback address free now, with a port below the kernel's ephemeral
// range (testutil.LowPort): a member killed and restarted listens on its ports again, and
// in between any listener on port 0 (every other test's) could be given a port from that
// range, while it is never given one below it.
func freeAddr(t testing.TB) string {
	return fmt.Sprintf("127.0.0.1:%d", testutil.LowPort(t, false))
}

func (c *Cluster) run(m *Member, state string) {
	c.t.Helper()
	logs, err := os.OpenFile(filepath.Join(m.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	m.logs = logs
	m.cmd = exec.Command(c.bin, "--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.Peer, "--initial-advertise-peer-urls", m.Peer,
		"--initial-cluster", c.initial, "--initial-cluster-state", state, "--initial-cluster-token", "kuma-dp-test",
		"--heartbeat-interval", "50", "--election-timeout", "300", "--log-level", "warn")
	if c.tls != nil {
		m.cmd.Args = append(m.cmd.Args, "--cert-file", c.tls.CertFile, "--key-file", c.tls.KeyFile)
	}
	m.cmd.Stdout, m.cmd.Stderr = logs, logs
	if err := m.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	m.exited = make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(m.exited) }()
}

func (m *Member) kill() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
	}
	m.logs.Close()
}

// Kill stops member i at once (SIGKILL).
func (c *Cluster) Kill(i int) { c.Members[i].kill() }

// Freeze stops member i without ending it (SIGSTOP): its connections stay open and
// nothing on them is answered, as with a hung process. Thaw resumes it; the test's end does.
func (c *Cluster) Freeze(i int) {
	c.t.Helper()
	m := c.Members[i]
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP to etcd member %s: %v", m.Name, err)
	}
	c.t.Cleanup(func() { _ = m.cmd.Process.Signal(syscall.SIGCONT) }) // before the kill
}

// Follower is the index of a running member that is not the cluster's leader: a test of
// one member frozen while the quorum holds freezes it (freezing the leader is an election
// first, during which no quorum answers - another test).
func (c *Cluster) Follower() int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := c.Client()
	for i, ep := range c.Endpoints() {
		st, err := cl.Status(ctx, ep)
		if err == nil && st.Leader != 0 && st.Leader != st.Header.MemberId {
			return i
		}
	}
	c.t.Fatal("etcdtest: no follower among the members")
	return -1
}

// Restart starts members again on their data and waits until they are healthy (a quorum
// of them must be running by then: restart every member killed at once together).
func (c *Cluster) Restart(is ...int) {
	c.t.Helper()
	var ms []*Member
	for _, i := range is {
		c.run(c.Members[i], "existing")
		ms = append(ms, c.Members[i])
	}
	c.WaitHealthy(ms...)
}

// WaitHealthy waits until each member answers /health with true.
func (c *Cluster) WaitHealthy(ms ...*Member) {
	c.t.Helper()
	if err := c.waitHealthy(ms...); err != nil {
		c.t.Fatal(err)
	}
}

// errPortTaken marks a member that exited because one of its ports was in use.
var errPortTaken = errors.New("port in use")

func (c *Cluster) waitHealthy(ms ...*Member) error {
	deadline := time.Now().Add(20 * time.Second)
	hc := http.DefaultClient
	if tc, err := c.clientTLS(); err != nil {
		return err
	} else if tc != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	for _, m := range ms {
		for {
			resp, err := hc.Get(m.ClientURL + "/health")
			if err == nil {
				var b [64]byte
				n, _ := resp.Body.Read(b[:])
				resp.Body.Close()
				if strings.Contains(string(b[:n]), `"health":"true"`) {
					break
				}
			}
			exited := false
			select {
			case <-m.exited:
				exited = true
			default:
			}
			if exited || time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
				if exited && strings.Contains(string(log), "address already in use") {
					return fmt.Errorf("etcd member %s exited: %w:\n%s", m.Name, errPortTaken, log)
				}
				if exited {
					return fmt.Errorf("etcd member %s exited:\n%s", m.Name, log)
				}
				return fmt.Errorf("etcd member %s not healthy after 20s (%v):\n%s", m.Name, err, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Client is a client of every member, closed at the end of the test.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	tc, err := c.clientTLS()
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, TLS: tc})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Compact compacts the cluster's history up to its current revision.
func (c *Cluster) Compact(ctx context.Context, cl *clientv3.Client) int64 {
	c.t.Helper()
	r, err := cl.Get(ctx, "compact-probe")
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		c.t.Fatal(err)
	}
	return r.Header.Revision
}

// clientTLS is a client's TLS configuration trusting the members' CA (nil: plain HTTP).
func (c *Cluster) clientTLS() (*tls.Config, error) {
	if c.tls == nil {
		return nil, nil
	}
	pem, err := os.ReadFile(c.tls.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", c.tls.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
