package shardzones

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/nsdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

const (
	zoneOrigin = "shard1.apps.test."
	xfrKey     = "kuma-xfr"
	xfrSecret  = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=" // base64
)

// cpReplica is one control-plane replica as kuma-cp serve runs it: the zones from the store
// (Run), their serials in etcd (Serials, written while it leads), readiness shared through
// Presence, and an authoritative DNS server that NOTIFYs the secondary.
type cpReplica struct {
	id        string
	addr      string // the DNS server's address, kept over restarts (the secondary's primary)
	connected sync.Map
	leader    atomic.Bool
	srv       *authdns.Server
	stop      context.CancelFunc
	done      sync.WaitGroup
}

func startReplica(t *testing.T, c *etcdtest.Cluster, id, addr, secondary string) *cpReplica {
	t.Helper()
	r := &cpReplica{id: id}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	srv, err := authdns.New(authdns.Config{Address: addr, TSIG: map[string]string{xfrKey: xfrSecret},
		Secondaries: []string{secondary}, NotifyKey: xfrKey, NotifyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	_, tcp := srv.Addrs()
	r.addr = tcp.String()
	ctx, cancel := context.WithCancel(context.Background())
	cl := c.Client()
	r.stop = func() { cancel(); r.done.Wait() }
	t.Cleanup(r.stop) // before the client is closed
	st := store.NewEtcd(cl, "/kuma")
	// readiness as kuma-cp serve has it: each replica publishes its agents (store.Presence),
	// the leader writes the routers' status from them (routerstatus)
	pres := st.Presence("agents", id, time.Second)
	online := func(m, name string) bool {
		_, ok := r.connected.Load(name)
		return ok || pres.Elsewhere(m+"/"+name)
	}
	serials := NewSerials(cl, "/kuma", r.leader.Load, nil)
	r.done.Add(5)
	go func() { defer r.done.Done(); srv.Run(ctx) }()
	go func() { defer r.done.Done(); pres.Run(ctx) }()
	go func() { // as fanout's ShareAgents
		defer r.done.Done()
		for ctx.Err() == nil {
			var names []string
			r.connected.Range(func(k, _ any) bool { names = append(names, "default/"+k.(string)); return true })
			pres.Publish(names)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer r.done.Done()
		st.RunWhileLeader(ctx, "kuma-cp", id, time.Second, func(lctx context.Context) {
			r.leader.Store(true)
			(&routerstatus.Writer{Store: st, Online: online, OnlineKnown: pres.Listed, Poll: 20 * time.Millisecond}).Run(lctx)
			r.leader.Store(false)
		})
	}()
	go func() {
		defer r.done.Done()
		Run(ctx, st, authdns.Input{}, serials, nil, func(z *Zones) { srv.Swap(z.All) })
	}()
	return r
}

// served is the replica's zone: serial and records (serial aside), or "" before its first build.
func (r *cpReplica) served() (uint32, string) {
	z := r.srv.Catalog().Zone(zoneOrigin)
	if z == nil {
		return 0, ""
	}
	var recs []string
	for _, rr := range z.Records()[1:] {
		recs = append(recs, rr.String())
	}
	return z.Serial(), strings.Join(recs, "\n")
}

// nsdAddrs is what the secondary answers for a name of the shard: its serial and addresses.
func nsdAddrs(addr string) (uint32, string) {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion("x."+zoneOrigin, dns.TypeA)
	r, _, err := c.Exchange(q, addr)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		return 0, ""
	}
	var got []string
	for _, rr := range r.Answer {
		got = append(got, rr.(*dns.A).A.String())
	}
	slices.Sort(got)
	return nsdtest.SOASerial(addr, zoneOrigin), strings.Join(got, ",")
}

// A rolling restart of three replicas on a three-member etcd, with nsd as the secondary of
// all of them, and a change of content while each is down (a gateway added, its agent gone
// with the replica it was connected to): after every step each replica serves the same
// serial for the same content, the serial is larger after each change and never goes back,
// `kuma-cp zones` (Served) gives that serial, and nsd follows every change. Each replica
// used to derive its serial from its own history: after a restart it served another serial
// for the same content (or an older one, which nsd ignored).
func TestSerialsAgreeOverARollingRestart(t *testing.T) {
	c := etcdtest.Start(t, 3)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	put := func(it store.Item) {
		t.Helper()
		if _, err := st.Put(ctx, it.Key, it.Doc, store.Any); err != nil {
			t.Fatal(err)
		}
	}
	put(item("Router", "shard1", 0, router))
	for i := 1; i <= 3; i++ {
		put(item("Dataplane", fmt.Sprint("gw-", i), 0, dp(fmt.Sprint("gw-", i), fmt.Sprint("10.0.0.", i), "gw")))
	}

	// nsd's port is needed by the replicas (NOTIFY) and theirs by nsd (transfers): the
	// replicas bind first, their addresses are kept over restarts
	nsdPort := testutil.FreeDNSPort(t)
	secondary := fmt.Sprintf("127.0.0.1:%d", nsdPort)
	addrOf := map[string]string{"gw-1": "10.0.0.1", "gw-2": "10.0.0.2", "gw-3": "10.0.0.3"}
	conns := []map[string]bool{{"gw-1": true}, {"gw-2": true}, {"gw-3": true}} // each replica's agents
	reps := make([]*cpReplica, 3)
	var primaries []string
	for i := range reps {
		reps[i] = startReplica(t, c, fmt.Sprint("replica-", i+1), "", secondary)
		for n := range conns[i] {
			reps[i].connected.Store(n, true)
		}
		_, port, _ := net.SplitHostPort(reps[i].addr)
		primaries = append(primaries, "127.0.0.1@"+port)
	}
	nsd := nsdtest.Start(t, nsdtest.Config{Port: nsdPort, KeyName: xfrKey, KeySecret: xfrSecret,
		Zones: []nsdtest.Zone{{Origin: zoneOrigin, Primaries: primaries}}})

	// want: the addresses of the gateways whose agent is connected to a running replica
	want := func(running []int) string {
		var out []string
		for _, i := range running {
			for n := range conns[i] {
				out = append(out, addrOf[n])
			}
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	var last uint32
	agree := func(step string, running []int) {
		t.Helper()
		wantAddrs := want(running)
		deadline := time.Now().Add(20 * time.Second)
		for {
			var got []string
			ok := true
			s0, c0 := reps[running[0]].served()
			for _, i := range running {
				s, content := reps[i].served()
				got = append(got, fmt.Sprintf("%s: serial %d", reps[i].id, s))
				ok = ok && s == s0 && content == c0 && s != 0
			}
			ns, nsAddrs := nsdAddrs(nsd)
			got = append(got, fmt.Sprintf("nsd: serial %d, %s", ns, nsAddrs))
			cat, _, err := Served(ctx, c.Client(), "/kuma", authdns.Input{})
			var cli uint32
			if err == nil && cat.Zone(zoneOrigin) != nil {
				cli = cat.Zone(zoneOrigin).Serial()
			}
			got = append(got, fmt.Sprintf("kuma-cp zones: serial %d", cli))
			if ok && ns == s0 && nsAddrs == wantAddrs && cli == s0 {
				if last != 0 && !authdns.SerialAfter(s0, last) {
					t.Fatalf("%s: serial %d after %d: want a larger one after a change", step, s0, last)
				}
				last = s0
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: want one serial everywhere and nsd answering %s:\n%s", step, wantAddrs, strings.Join(got, "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	agree("start", []int{0, 1, 2})
	for i, r := range reps {
		r.stop() // its gateways' agents go with it (not ready: out of the answers)
		next := (i + 1) % 3
		// a gateway added while the replica is down, its agent on the next replica
		extra := fmt.Sprint("gw-x", i)
		addrOf[extra] = fmt.Sprint("10.0.1.", i)
		put(item("Dataplane", extra, 0, dp(extra, addrOf[extra], "gw")))
		conns[next][extra] = true
		reps[next].connected.Store(extra, true)
		agree(fmt.Sprintf("replica %d down", i+1), []int{next, (i + 2) % 3})
		// restarted on the same address: its agents connect again
		reps[i] = startReplica(t, c, r.id, r.addr, secondary)
		for n := range conns[i] {
			reps[i].connected.Store(n, true)
		}
		agree(fmt.Sprintf("replica %d restarted", i+1), []int{0, 1, 2})
	}
}

// The rules of Serials, one by one, on a real etcd: the leader records new content; another
// replica serves the recorded serial for the recorded content, keeps serving a zone as it was
// while its new content is not recorded, and serves its own after Hold (a serial ahead of the
// record, never behind what it served); unchanged content keeps its serial; a replica started
// afresh serves the record.
func TestSerialsRules(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	leader := NewSerials(c.Client(), "/kuma", func() bool { return true }, nil)
	other := NewSerials(c.Client(), "/kuma", nil, nil)
	other.Hold = time.Hour
	go leader.Run(ctx)
	go other.Run(ctx)
	input := func(rev int64, addrs ...string) authdns.Input {
		in := authdns.Input{DefaultNSAddr: netip.MustParseAddr("192.0.2.53")}
		r := authdns.Router{Name: "shard1", DNS: "shard1.apps.test", Revision: rev}
		for _, a := range addrs {
			r.Replicas = append(r.Replicas, authdns.Replica{Name: a, Addrs: []netip.Addr{netip.MustParseAddr(a)}, Ready: true})
		}
		in.Routers = []authdns.Router{r}
		return in
	}
	zoneOf := func(cat *authdns.Catalog) (uint32, uint64) {
		z := cat.Zone(zoneOrigin)
		return z.Serial(), z.Hash()
	}
	recorded := func(s *Serials, hash uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.mu.Lock()
			got := s.recs[zoneOrigin].hash
			s.mu.Unlock()
			if got == hash {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the record never reached hash %x", hash)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	a, _ := leader.Build(input(10, "10.0.0.1"), nil)
	sa, ha := zoneOf(a)
	if sa != 10 {
		t.Fatalf("the leader's first serial %d, want the revision 10", sa)
	}
	recorded(other, ha)
	oa, _ := other.Build(input(10, "10.0.0.1"), nil)
	if s, _ := zoneOf(oa); s != sa {
		t.Fatalf("the other replica's serial %d for the recorded content, want %d", s, sa)
	}
	// new content on the other replica first: the zone as it was, until the leader records it
	ob, _ := other.Build(input(11, "10.0.0.1", "10.0.0.2"), oa)
	if s, h := zoneOf(ob); s != sa || h != ha {
		t.Fatalf("unrecorded content served with serial %d (hash %x), want the zone held at %d", s, h, sa)
	}
	select { // a signal of before (its first read of the records)
	case <-other.Changed():
	default:
	}
	b, _ := leader.Build(input(11, "10.0.0.1", "10.0.0.2"), a)
	sb, hb := zoneOf(b)
	if sb != 11 {
		t.Fatalf("the leader's serial after a change at revision 11: %d", sb)
	}
	select {
	case <-other.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica was not told of the leader's record")
	}
	ob, _ = other.Build(input(11, "10.0.0.1", "10.0.0.2"), ob)
	if s, h := zoneOf(ob); s != sb || h != hb {
		t.Fatalf("after the record: serial %d hash %x, want %d %x", s, h, sb, hb)
	}
	// unchanged content, a later revision elsewhere: the same serial
	if b2, _ := leader.Build(input(12, "10.0.0.1", "10.0.0.2"), b); func() uint32 { s, _ := zoneOf(b2); return s }() != sb {
		t.Fatal("the serial moved without a change of content")
	}
	// past Hold, a replica serves its own content, ahead of the record
	other.Hold = 50 * time.Millisecond
	other.Build(input(11, "10.0.0.3"), ob)
	time.Sleep(100 * time.Millisecond)
	oc, _ := other.Build(input(11, "10.0.0.3"), ob)
	sc, hc := zoneOf(oc)
	if hc == hb || !authdns.SerialAfter(sc, sb) {
		t.Fatalf("after Hold: serial %d hash %x, want its own content with a serial after %d", sc, hc, sb)
	}
	// back to the recorded content: never behind what it served
	od, _ := other.Build(input(11, "10.0.0.1", "10.0.0.2"), oc)
	sd, _ := zoneOf(od)
	if !authdns.SerialAfter(sd, sc) {
		t.Fatalf("back to the recorded content: serial %d, want one after %d (served before)", sd, sc)
	}
	// the zone deleted (the router gone), then back with older inputs: past its last serial
	// all the same (a secondary may still hold the zone)
	last := sd // the other replica's serial of the recorded content, recorded in its turn
	deadline := time.Now().Add(10 * time.Second)
	for {
		leader.mu.Lock()
		got := leader.recs[zoneOrigin].serial
		leader.mu.Unlock()
		if got == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record has serial %d, want the other replica's %d", got, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var gone *authdns.Catalog
	for { // built again until the records are written, as Run does when told of a change
		gone, _ = leader.Build(authdns.Input{DefaultNSAddr: netip.MustParseAddr("192.0.2.53")}, b)
		if gone.Zone(zoneOrigin) != nil {
			t.Fatal("the zone is still built without its router")
		}
		leader.mu.Lock()
		_, left := leader.recs[zoneOrigin]
		floor := leader.recs[floorKey].serial
		leader.mu.Unlock()
		if !left && floor == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record of the deleted zone: still there %v, floor %d (want gone, %d)", left, floor, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	back, _ := leader.Build(input(3, "10.0.0.1"), gone)
	if s, _ := zoneOf(back); !authdns.SerialAfter(s, last) {
		t.Fatalf("the zone back at revision 3: serial %d, want one after %d (its last)", s, last)
	}
	b, _ = leader.Build(input(11, "10.0.0.1", "10.0.0.2"), back)
	sb, hb = zoneOf(b)
	recorded(other, hb)

	// a replica started afresh: the record's serial, not one from its own history
	fresh := NewSerials(c.Client(), "/kuma", nil, nil)
	if _, err := fresh.Load(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := fresh.Build(input(11, "10.0.0.1", "10.0.0.2"), nil)
	recorded(fresh, hb)
	if s, _ := zoneOf(f); !authdns.SerialAfter(s, sb-1) {
		t.Fatalf("a restarted replica serves %d, behind the record %d", s, sb)
	}
}

// A read of the records that lands after the watch delivered a newer record (Run's and the
// first build's reads overlap the watch) keeps the newer one: a replica that took a serial
// past the leader's for the same content then records it, and the leader serves it too. A
// read that replaced the records lost the leader's record for good: the two replicas served
// 3 and 5 for one content until the next change (TestE2ESerialsAgreeOverARollingRestart's
// start, 1 run in 10 under load).
func TestSerialsAReadNeverForgetsANewerRecord(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	input := func(rev int64) authdns.Input {
		in := authdns.Input{DefaultNSAddr: netip.MustParseAddr("192.0.2.53")}
		in.Routers = []authdns.Router{{Name: "shard1", DNS: "shard1.apps.test", Revision: rev,
			Replicas: []authdns.Replica{{Name: "gw-1", Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.1")}}}}}
		return in
	}
	serial := func(cat *authdns.Catalog) uint32 { return cat.Zone(zoneOrigin).Serial() }
	recordOf := func(s *Serials) serialRecord {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.recs[zoneOrigin]
	}
	leader := NewSerials(c.Client(), "/kuma", func() bool { return true }, nil)
	other := NewSerials(c.Client(), "/kuma", nil, nil)
	go leader.Run(ctx)
	go other.Run(ctx)

	// The other replica, first, builds the zone at revision 5 with no record: serial 5.
	oa, _ := other.Build(input(5), nil)
	if got := serial(oa); got != 5 {
		t.Fatalf("first serial %d, want 5", got)
	}
	stale, staleRev, err := other.read(ctx) // a read under way: no record yet
	if err != nil {
		t.Fatal(err)
	}
	// The leader, whose view was older, built the same content at revision 3 and records it.
	la, _ := leader.Build(input(3), nil)
	if got := serial(la); got != 3 {
		t.Fatalf("the leader's first serial %d, want 3", got)
	}
	waitRecord := func(s *Serials, what string, want uint32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for recordOf(s).serial != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the record's serial is %d, want %d", what, recordOf(s).serial, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitRecord(other, "the leader's record followed", 3)
	other.merge(stale, staleRev) // the read under way lands now
	if recordOf(other).serial != 3 {
		t.Fatal("a read begun before the leader's record made the other replica forget it")
	}
	// Told of the record, the other replica builds again: it keeps 5 (never behind what it
	// served) and records it; the leader follows.
	ob, _ := other.Build(input(5), oa)
	if got := serial(ob); got != 5 {
		t.Fatalf("the other replica went from 5 to %d", got)
	}
	waitRecord(leader, "the other replica's serial recorded", 5)
	lb, _ := leader.Build(input(5), la)
	if got := serial(lb); got != 5 {
		t.Fatalf("the leader serves %d for the content the other serves as 5", got)
	}
}

// A record asked to be written twice - two builds of one content on the leader, the second
// asked before the first was written, so compared on the version before it - is written once
// and the second ask is done, not refused as another writer's change (which logged a warning
// and built the zones again at every start of a replica with routers).
func TestSerialsSameRecordAskedTwiceIsDone(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := NewSerials(c.Client(), "/kuma", func() bool { return true }, nil)
	ctx := context.Background()
	rec := serialRecord{hash: 0xabc, serial: 7}
	for i := range 2 {
		if err := s.write(ctx, zoneOrigin, rec); err != nil { // both compared on version 0
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	if err := s.write(ctx, zoneOrigin, serialRecord{hash: 0xdef, serial: 7}); !errors.Is(err, errRecordAhead) {
		t.Fatalf("another content with the recorded serial, on a stale version: %v, want errRecordAhead", err)
	}
}
