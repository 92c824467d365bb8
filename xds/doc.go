// Package xds owns the Envoy resources of one dataplane and the local xDS server that feeds
// them to its Envoy.
//
// Generate turns a mesh.Snapshot and a vipalloc.Table into listeners, clusters and endpoint
// assignments (outbounds, L4 TrafficRoute splits as seed 004 designs them, and
// MeshExternalServices as seed 002 designs them); Resources.Validate checks them against
// Envoy's own protos, every embedded typed_config included, and cross-checks the names they
// use. Server publishes the last valid set over ADS (delta and state of the world) on a unix
// socket, with per-resource versions that change only when the content does.
//
// It never allocates VIPs, renders hostnames or reads files: it is a pure function of its
// inputs plus the server's last published set.
package xds
