package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/cli"
)

// A --replica-id that inspect's REPLICAS cannot show as given is refused (serve exits 2 on
// check's error): the presence keys wrote "a/b" as "a_b", so replicas named it two ways, and
// a comma split it.
func TestServeReplicaIDRefused(t *testing.T) {
	for id, ok := range map[string]bool{"a/b": false, "a,b": false, "a b": false, "": false, "kuma-cp-0.example-1234": true} {
		c := StoreConfig{Kind: "etcd", Etcd: cli.Etcd{Endpoints: "http://127.0.0.1:2379", Prefix: "/kuma"}, AdminTokenFile: "t", RouteStrategy: "round-robin", ReplicaID: id}
		err := c.Check()
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--replica-id")) {
			t.Errorf("--replica-id %q: %v", id, err)
		}
	}
}

// A --dns-user-zone that is not a user's domain (a top-level domain, a public suffix, a name
// in arpa) is refused at start, naming the flag and the value.
func TestServeUserZoneRefused(t *testing.T) {
	for zone, ok := range map[string]bool{"com": false, "co.uk": false, "in-addr.arpa": false, "acme.test": true, "apps.example.com": true} {
		c := StoreConfig{Kind: "etcd", Etcd: cli.Etcd{Endpoints: "http://127.0.0.1:2379", Prefix: "/kuma"}, AdminTokenFile: "t", RouteStrategy: "round-robin", ReplicaID: "r"}
		c.DNS.UserZones = []string{zone}
		err := c.Check()
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), `--dns-user-zone: users' zone "`+zone+`"`)) {
			t.Errorf("--dns-user-zone %q: %v", zone, err)
		}
	}
}

// --dns-address on every address (0.0.0.0, ::) without --dns-nameserver is refused: the
// zones' NS would have the glue 127.0.0.1, which no secondary or resolver can reach.
func TestServeUnspecifiedDNSAddressNeedsANameserver(t *testing.T) {
	for _, c := range []struct {
		addr string
		nss  []string
		ok   bool
	}{
		{"0.0.0.0:53", nil, false}, {"[::]:53", nil, false},
		{"0.0.0.0:53", []string{"ns1.example.com=192.0.2.53"}, true},
		{"127.0.0.1:5653", nil, true}, {"", nil, true},
	} {
		ec := StoreConfig{Kind: "etcd", Etcd: cli.Etcd{Endpoints: "http://127.0.0.1:2379", Prefix: "/kuma"}, AdminTokenFile: "t", RouteStrategy: "round-robin", ReplicaID: "r"}
		ec.DNS.Address, ec.DNS.Nameservers = c.addr, c.nss
		err := ec.Check()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--dns-nameserver")) {
			t.Errorf("--dns-address %q --dns-nameserver %v: %v", c.addr, c.nss, err)
		}
	}
}

// An --etcd-prefix that would put this installation's keys among another's - inside it
// (/kuma/staging: mesh "staging" of /kuma) or on its leader's keys (/kuma-leader) - is
// refused, naming the flag and the value.
func TestServeEtcdPrefixRefused(t *testing.T) {
	for prefix, ok := range map[string]bool{"/kuma/staging": false, "/kuma/": false, "kuma": false, "/": false, "/kuma-leader": false,
		"/kuma-presence": false, "/kuma-zones": false, "/ku ma": false, "/kuma": true, "/kuma-staging": true} {
		c := StoreConfig{Kind: "etcd", Etcd: cli.Etcd{Endpoints: "http://127.0.0.1:2379", Prefix: prefix}, AdminTokenFile: "t", RouteStrategy: "round-robin", ReplicaID: "r"}
		err := c.Check()
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--etcd-prefix "+strconv.Quote(prefix))) {
			t.Errorf("--etcd-prefix %q: %v", prefix, err)
		}
	}
}
