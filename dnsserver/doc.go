// Package dnsserver is kuma-dp's resolver: CoreDNS embedded as a library (core/dnsserver
// with the bind, kumavip, kumaroutes, cache and forward plugins, never coremain) answering
// the VIP hostnames of a vipalloc.Table and its mesh's router shards' names (the zones the
// control plane builds for the mesh, answered by package authdns's engine: routezones.go; a
// name a partial users' zone does not hold is forwarded) and forwarding every other name to
// the host's resolvers.
//
// It owns: the generated Corefile (or a user template), the listening sockets (UDP and
// TCP, bound by this package, not by Caddy), the kumavip plugin and its answers (A, AAAA,
// PTR, search-domain CNAMEs, NODATA), a UDP fast path that answers VIP queries before
// CoreDNS's per-query machinery, and the resolver's Prometheus metrics.
//
// It never reads anything but the Table handed to Swap and the zones handed to SwapZones:
// it does not allocate VIPs, watch files or talk to a control plane, and it never answers
// NXDOMAIN for a name it owns.
//
// The kumavip plugin follows CoreDNS's layout: setup.go (registration, the Corefile line),
// kumavip.go (the handler), README.md (its syntax and examples).
//
// How CoreDNS is embedded (pitfalls in docs/dns.md): the plugin is registered once
// per process; the generated Corefile names this server by an id ("kumavip <id>") so the
// plugin finds the live table in a registry; kumavip's setup withholds the block's listen
// hosts so caddy.Start binds nothing, and Run builds the servers with the context's own
// MakeServers and serves them on sockets it binds itself (no SO_REUSEPORT: a busy port is
// an error, not a silent split). Shutdown runs the instance's shutdown callbacks, stops the
// servers, closes the sockets and waits for every serve loop, with a time limit.
package dnsserver
