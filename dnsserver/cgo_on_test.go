//go:build cgo && !netgo

package dnsserver

// cgoResolver: this test binary has Go's cgo resolver (GODEBUG=netdns=cgo uses getaddrinfo).
const cgoResolver = true
