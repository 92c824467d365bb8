//go:build !linux

package agent

// releaseBinaryPages is Linux only (see binpages_linux.go).
func releaseBinaryPages() (uint64, error) { return 0, nil }
