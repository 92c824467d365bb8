package authdns

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/nsdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// TestZonesPassNamedCheckzone writes every zone as a master file and has BIND's
// named-checkzone read it.
func TestZonesPassNamedCheckzone(t *testing.T) {
	bin, err := exec.LookPath("named-checkzone")
	if err != nil {
		t.Skip("named-checkzone not installed (Debian package bind9-utils; make test installs it as root)")
	}
	cat, _ := Build(fixture(), nil)
	dir := t.TempDir()
	for _, z := range cat.Zones() {
		var buf bytes.Buffer
		if err := WriteZone(&buf, z); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, strings.TrimSuffix(z.Origin, "."))
		if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, z.Origin, f).CombinedOutput()
		if err != nil {
			t.Errorf("named-checkzone %s: %v\n%s\n%s", z.Origin, err, out, buf.String())
		}
	}
}

// TestNSDSecondary runs a real nsd as a secondary of this server (hidden primary): it
// transfers the zone, and after a change and a NOTIFY it answers the new data.
func TestNSDSecondary(t *testing.T) {
	const zone = "shard1.apps.example.com."
	in := fixture()
	serials := NewSerials()
	cat, _ := Build(in, serials)

	nsdPort := testutil.FreeDNSPort(t)
	s := startServer(t, Config{
		TSIG:          map[string]string{testKey: testSecret},
		Secondaries:   []string{fmt.Sprintf("127.0.0.1:%d", nsdPort)},
		NotifyKey:     testKey,
		NotifyTimeout: time.Second,
	}, cat)
	_, tcp := s.Addrs()
	nsdAddr := nsdtest.Start(t, nsdtest.Config{Port: nsdPort, KeyName: testKey, KeySecret: testSecret,
		Zones: []nsdtest.Zone{{Origin: zone, Primaries: []string{fmt.Sprintf("127.0.0.1@%d", tcp.(*net.TCPAddr).Port)}}}})

	addrsFrom := func() (uint32, []string) {
		c := &dns.Client{Timeout: time.Second}
		q := new(dns.Msg)
		q.SetQuestion("app-ns.shard1.apps.example.com.", dns.TypeA)
		r, _, err := c.Exchange(q, nsdAddr)
		if err != nil || r.Rcode != dns.RcodeSuccess {
			return 0, nil
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		return nsdtest.SOASerial(nsdAddr, zone), got
	}
	waitFor := func(serial uint32, want int) []string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if sr, got := addrsFrom(); sr == serial && len(got) == want {
				return got
			}
			time.Sleep(100 * time.Millisecond)
		}
		sr, got := addrsFrom()
		t.Fatalf("nsd has serial %d and %v; want serial %d with %d addresses", sr, got, serial, want)
		return nil
	}
	first := cat.Zone(zone).Serial()
	waitFor(first, 2)

	// a replica becomes ready at a later revision: new serial, NOTIFY, nsd transfers again
	in.Routers[0].Replicas[2].Ready = true
	in.Routers[0].Revision = 40
	cat, _ = Build(in, serials)
	s.Swap(cat)
	got := waitFor(40, 3)
	if !strings.Contains(strings.Join(got, ","), "10.0.0.3") {
		t.Fatalf("nsd answers %v after the change", got)
	}
}
