// Package vipalloc owns hostnames and VIPs for one dataplane: which names are rendered (a
// VirtualOutbound's tag tuples, a HostnameGenerator's MeshExternalServices and MeshServices, with package
// hostname's templates), wildcard expansion into tag tuples, per-dataplane VIP
// allocation (IPv4 with an IPv6 twin), collisions and statuses, and the resulting Table.
//
// It never serves DNS, never builds Envoy resources and never reads files other than its own
// small state file.
package vipalloc
