package authdns

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/nsdtest"
)

// badTSIG are signed queries that must be refused (RFC 8945 5.2): each packed as it goes on
// the wire.
func badTSIG(t *testing.T) map[string][]byte {
	t.Helper()
	sign := func(key, secret string, at time.Time, qtype uint16) []byte {
		m := new(dns.Msg)
		m.SetQuestion("shard1.apps.example.com.", qtype)
		m.SetTsig(key, dns.HmacSHA256, 300, at.Unix())
		b, _, err := dns.TsigGenerate(m, secret, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now()
	truncated := func(qtype uint16) []byte {
		m := new(dns.Msg)
		if err := m.Unpack(sign(testKey+".", testSecret, now, qtype)); err != nil {
			t.Fatal(err)
		}
		ts := m.IsTsig()
		ts.MAC, ts.MACSize = ts.MAC[:20], 10
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	other := "b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldC0xMjM0NTY=" // base64, not testSecret
	out := map[string][]byte{}
	for _, qt := range []uint16{dns.TypeSOA, dns.TypeAXFR} {
		q := dns.TypeToString[qt]
		out[q+" unknown key"] = sign("nokey.", testSecret, now, qt)
		out[q+" bad MAC"] = sign(testKey+".", other, now, qt)
		out[q+" time skew"] = sign(testKey+".", testSecret, now.Add(-time.Hour), qt)
		out[q+" truncated MAC"] = truncated(qt)
	}
	return out
}

func exchangeRaw(t *testing.T, network, addr string, p []byte) *dns.Msg {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	co := &dns.Conn{Conn: c}
	if _, err := co.Write(p); err != nil {
		t.Fatal(err)
	}
	r, err := co.ReadMsg()
	if err != nil && r == nil {
		t.Fatalf("%s %s: %v", network, addr, err)
	}
	return r
}

// tsigResult is a response's rcode and TSIG error, as text.
func tsigResult(r *dns.Msg) string {
	s := dns.RcodeToString[r.Rcode]
	if ts := r.IsTsig(); ts != nil {
		s += fmt.Sprintf(" tsig-error=%s mac=%v", dns.RcodeToString[int(ts.Error)], ts.MAC != "")
	} else {
		s += " unsigned"
	}
	return s
}

// A query or transfer whose TSIG does not verify - unknown key, bad MAC, time outside the
// fudge, truncated MAC - gets what nsd gives it (RFC 8945 5.2): NOTAUTH with the TSIG error,
// unsigned, over UDP and TCP; nothing is answered (a query with a bad MAC used to be answered
// as if unsigned, a transfer got REFUSED without TSIG). A key name in another case is the
// same key (it was refused).
func TestTSIGErrorsAsNSD(t *testing.T) {
	cat, _ := Build(fixture(), nil)
	var b bytes.Buffer
	if err := WriteZone(&b, cat.Zone("shard1.apps.example.com")); err != nil {
		t.Fatal(err)
	}
	nsd := nsdtest.Start(t, nsdtest.Config{KeyName: testKey, KeySecret: testSecret, Zones: []nsdtest.Zone{{Origin: "shard1.apps.example.com.", File: b.String()}}})
	s := startServer(t, Config{TSIG: map[string]string{testKey: testSecret}}, cat)
	udp, tcp := s.Addrs()
	for what, p := range badTSIG(t) {
		want := exchangeRaw(t, "tcp", nsd, p)
		for network, addr := range map[string]string{"udp": udp.String(), "tcp": tcp.String()} {
			got := exchangeRaw(t, network, addr, p)
			if tsigResult(got) != tsigResult(want) || len(got.Answer) != 0 || !strings.HasPrefix(tsigResult(want), "NOTAUTH tsig-error=") {
				t.Errorf("%s over %s: %s with %d answers, want %s as nsd", what, network, tsigResult(got), len(got.Answer), tsigResult(want))
			}
		}
	}
	// the key's name in upper case: the same key
	m := new(dns.Msg)
	m.SetAxfr("shard1.apps.example.com.")
	m.SetTsig(strings.ToUpper(testKey)+".", dns.HmacSHA256, 300, time.Now().Unix())
	tr := &dns.Transfer{TsigSecret: map[string]string{strings.ToUpper(testKey) + ".": testSecret}}
	env, err := tr.In(m, tcp.String())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for e := range env {
		if e.Error != nil {
			t.Fatalf("AXFR with the key named %s: %v", strings.ToUpper(testKey), e.Error)
		}
		n += len(e.RR)
	}
	if n == 0 {
		t.Fatal("AXFR with the key in upper case: no records")
	}
}
