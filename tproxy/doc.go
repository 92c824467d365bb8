// Package tproxy owns the transparent proxy of a dataplane: the iptables rule sets (IPv4 and
// IPv6) that send an application's outbound TCP to Envoy's outbound port, inbound TCP to its
// inbound port and DNS (UDP and TCP port 53) to the embedded resolver, and the netlink
// changes that make the VIP ranges routable.
//
// Every rule is written in one `iptables-restore --noflush` transaction per family and
// carries one of our "kuma-dp/..." comments; our five KUMA_MESH_ chains are ours only while
// they hold nothing else (Kuma's kumactl uses the same names). So Uninstall removes exactly
// what Install added and a crashed agent's leftovers are reconciled, never stacked. Rules of
// others (Docker's DOCKER_OUTPUT, a CNI's chains, kumactl's, Istio's) are never touched.
//
// It never starts Envoy or the resolver, never reads the mesh model, and never flushes a
// table or a chain it does not own.
package tproxy
