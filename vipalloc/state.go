package vipalloc

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// stateVersion is the state file's format version; files of another version are ignored.
const stateVersion = 1

// stateFile is the JSON of the state file: every key that holds a VIP, and its IPv4 VIP.
// Keys are hostnames, or "mes/<name>" for MeshExternalService VIPs.
type stateFile struct {
	Version int               `json:"version"`
	VIPs    map[string]string `json:"vips"`
}

// loadState reads the state file. A missing file is an empty state; an unreadable or corrupt
// one is logged and ignored (never fatal: the allocator then starts fresh).
func (s *settings) loadState() map[string]uint32 {
	out := map[string]uint32{}
	if s.stateFile == "" {
		return out
	}
	b, err := os.ReadFile(s.stateFile)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		s.log.Warn("vipalloc: state file unreadable, starting fresh", "file", s.stateFile, "err", err)
		return out
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		s.log.Warn("vipalloc: state file corrupt, starting fresh", "file", s.stateFile, "err", err)
		return out
	}
	if st.Version != stateVersion {
		s.log.Warn("vipalloc: state file of another version, starting fresh", "file", s.stateFile,
			"version", st.Version)
		return out
	}
	bad := 0
	for k, v := range st.VIPs {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			bad++
			continue
		}
		out[k] = v4u(a)
	}
	if bad > 0 {
		s.log.Warn("vipalloc: state file has unusable addresses, ignored them", "file", s.stateFile, "count", bad)
	}
	return out
}

// saveState writes every assignment to the state file atomically (temp file in the same
// directory, fsync, rename).
func (s *settings) saveState(vips map[string]uint32) error {
	st := stateFile{Version: stateVersion, VIPs: make(map[string]string, len(vips))}
	for k, v := range vips {
		st.VIPs[k] = u4(v).String()
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.stateFile)
	f, err := os.CreateTemp(dir, "."+filepath.Base(s.stateFile)+".tmp*")
	if err != nil {
		return fmt.Errorf("vipalloc: state file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := firstErr(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vipalloc: state file %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, s.stateFile); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vipalloc: state file: %w", err)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
