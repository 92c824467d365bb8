package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/nsdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// Two kuma-cp replicas on a three-member etcd, nsd a secondary of both, restarted in turn
// (SIGKILL, then started again on the same DNS address) with a gateway added while the
// first is down and deleted while the second is: after every step both replicas, nsd and `kuma-cp zones -o json` give the shard's
// zone one serial, larger than the one before after a change, the same after a restart. Each replica's serial used to come from its
// own history: after a restart it served another (or a smaller) serial for the same
// content, and nsd stayed on the old data.
func TestE2ESerialsAgreeOverARollingRestart(t *testing.T) {
	env := newShardEnv(t, 3)
	env.put(t, "Router", "shard1", shardRouter)
	env.put(t, "Dataplane", "gw-1", gatewayDP("gw-1", "10.1.0.1"))
	nsdPort := testutil.FreeDNSPort(t)
	secondary := fmt.Sprintf("127.0.0.1:%d", nsdPort)
	start := func(dnsAddr string) (*proc, string) {
		p, addr, _ := env.startCPProc(t, "--dns-address", dnsAddr, "--dns-transfer-from", "127.0.0.1/32", "--dns-secondary", secondary)
		return p, addr
	}
	procs, addrs := make([]*proc, 2), make([]string, 2)
	for i := range procs {
		procs[i], addrs[i] = start("127.0.0.1:0")
	}
	var primaries []string
	for _, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		primaries = append(primaries, "127.0.0.1@"+port)
	}
	nsd := nsdtest.Start(t, nsdtest.Config{Port: nsdPort, Zones: []nsdtest.Zone{{Origin: "shard1.apps.test.", Primaries: primaries}}})
	serialAt := func(server string) uint32 {
		if m, err := query(server, "shard1.apps.test", dns.TypeSOA, false); err == nil && len(m.Answer) == 1 {
			return m.Answer[0].(*dns.SOA).Serial
		}
		return 0
	}
	cliSerial := func() uint32 {
		var zones []struct {
			Origin string `json:"origin"`
			Serial uint32 `json:"serial"`
		}
		var out, errb strings.Builder
		if rc := dispatch([]string{"zones", "--etcd-endpoints", strings.Join(env.c.Endpoints(), ","), "--dns-address", "127.0.0.1:5653", "-o", "json"}, &out, &errb); rc != exitOK {
			return 0
		}
		if json.Unmarshal([]byte(out.String()), &zones) != nil {
			return 0
		}
		for _, z := range zones {
			if z.Origin == "shard1.apps.test." {
				return z.Serial
			}
		}
		return 0
	}
	var last uint32
	// agree waits for one serial everywhere: larger than the last after a change, the same
	// after a restart alone
	agree := func(step string, changed bool, servers []string, want []string) {
		t.Helper()
		var got string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			s0 := serialAt(servers[0])
			ok := s0 != 0 && strings.Join(benchAddrs(servers[0], "x.shard1.apps.test"), ",") == strings.Join(want, ",")
			got = fmt.Sprintf("%s: %d", servers[0], s0)
			for _, srv := range servers[1:] {
				s := serialAt(srv)
				got += fmt.Sprintf(", %s: %d", srv, s)
				ok = ok && s == s0 && strings.Join(benchAddrs(srv, "x.shard1.apps.test"), ",") == strings.Join(want, ",")
			}
			cli := cliSerial()
			got += fmt.Sprintf(", kuma-cp zones: %d", cli)
			if ok && cli == s0 {
				if changed && last != 0 && int32(s0-last) <= 0 {
					t.Fatalf("%s: serial %d after %d: want a larger one after a change", step, s0, last)
				}
				if !changed && s0 != last {
					t.Fatalf("%s: serial %d, %d before: a restart changes no content, nor the serial", step, s0, last)
				}
				last = s0
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: want one serial and %v everywhere; serials: %s", step, want, got)
	}
	want := []string{"10.1.0.1"}
	agree("start", true, []string{addrs[0], addrs[1], nsd}, want)
	for i := range procs {
		procs[i].Kill()
		if i == 0 { // a gateway added
			env.put(t, "Dataplane", "gw-x", gatewayDP("gw-x", "10.1.1.1"))
			want = []string{"10.1.0.1", "10.1.1.1"}
		} else { // and deleted: the zone's newest input is older than before
			if err := env.st.Delete(context.Background(), cpstore.Key{Mesh: "default", Type: "Dataplane", Name: "gw-x"}, cpstore.Any); err != nil {
				t.Fatal(err)
			}
			want = []string{"10.1.0.1"}
		}
		agree(fmt.Sprintf("replica %d down", i+1), true, []string{addrs[1-i], nsd}, want)
		procs[i], _ = start(addrs[i])
		agree(fmt.Sprintf("replica %d restarted", i+1), false, []string{addrs[0], addrs[1], nsd}, want)
	}
}
