// Package xds owns the Envoy resources of one dataplane and the local xDS server that feeds
// them to its Envoy.
//
// Generate turns a mesh.Snapshot and a vipalloc.Table into listeners, clusters and endpoint
// assignments (outbounds, L4 TrafficRoute splits as the L4 TrafficRoute design designs them,
// with Kuma's conf.loadBalancer on their clusters and, for an outbound to an HTTP service,
// conf.http's rules in an http_connection_manager (httproute.go), MeshExternalServices
// as the MeshExternalService design designs them, MeshService ports and Kuma 2.x's
// MeshTCPRoutes and MeshHTTPRoutes (meshroutes.go, meshhttp.go)); Resources.Validate checks them against
// Envoy's own protos, every embedded typed_config included, and cross-checks the names they
// use. Server publishes the last valid set over ADS (delta and state of the world) on a unix
// socket, with per-resource versions that change only when the content does. A Generator
// is Generate with a memory: after a TrafficRoute or another dataplane changes, it rebuilds
// only the outbounds affected, and Validate and Server.Update then touch only those.
//
// It never allocates VIPs, renders hostnames or reads files: its output is a function of its
// inputs alone (the Generator's memory changes how fast, never what).
package xds
