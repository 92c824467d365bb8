//go:build !cgo || netgo

package dnsserver

// cgoResolver: this test binary has no cgo resolver (built with CGO_ENABLED=0 or netgo).
const cgoResolver = false
