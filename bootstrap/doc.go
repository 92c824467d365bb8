// Package bootstrap owns the local Envoy process: its v3 bootstrap file (node identity,
// admin socket, ADS over the agent's xDS unix socket, the runtime layers that lift Envoy's
// RE2 program size limit), finding the binary and its version, and supervising it - start,
// restart on crash with backoff, drain, stop.
//
// It never generates listeners or clusters (package xds does) and never serves xDS.
package bootstrap
