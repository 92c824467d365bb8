// Package authdns is the control plane's authoritative DNS for router shards and the users'
// own domains.
//
// It owns: turning routers (a public DNS name and gateway replicas with their readiness) and
// admitted user-domain routes into zones (Build); answering queries from those zones as an
// authoritative server must (RFC 1034 and RFC 4592 wildcard rules, NODATA with the SOA,
// negative TTL, AA, CNAME chasing inside the answer, EDNS, truncation) with the A/AAAA set of
// a shard rotated on every answer; serving them over UDP and TCP with zone transfers
// (AXFR, and IXFR answered with the whole zone) restricted by an allow list or TSIG, and
// NOTIFY to secondaries when a zone's serial changes; writing a zone in RFC 1035
// master-file form and reading it back (ParseZone: how the zones reach the agents, whose
// resolvers answer with this same engine); and a prepared form of every catalog that answers
// standard queries straight from the packet, allocation-free (AppendAnswer; the UDP path
// uses it, reading and writing datagrams in batches).
//
// It imports no other package of this project, so the agents import it without the control
// plane (TestNoControlPlaneDependencies).
//
// It never reads the store, schedules routes or decides admission: its caller gives it the
// routers, their ready replicas and the admitted user names, and swaps in a new catalog when
// they change.
package authdns
