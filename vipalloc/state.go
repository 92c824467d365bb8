package vipalloc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/kumadp/kuma-dp/internal/jsontext"
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

// appendJSONName appends key k as a JSON string, a default name from its two parts (its
// tail, ".mesh", needs no escaping: it goes inside the head's closing quote).
func appendJSONName(b []byte, k hostName) []byte {
	b = jsontext.AppendString(b, k.head)
	if k.tail == "" {
		return b
	}
	return append(append(b[:len(b)-1], k.tail...), '"')
}

// writeState writes the state file atomically (temp file in the same directory, fsync,
// rename) from the assignments each calls add with. The JSON is written directly (keys
// unsorted): tens of thousands of names take milliseconds, not the tens of milliseconds of
// encoding/json with sorted keys. It streams through a 64 KiB buffer: the first table's
// file is written when the allocator holds the most, and 100,000 names' JSON in memory
// whole was ~3.5 MB more (twice that while its buffer grew).
func (s *settings) writeState(each func(add func(key hostName, v uint32))) error {
	dir := filepath.Dir(s.stateFile)
	f, err := os.CreateTemp(dir, "."+filepath.Base(s.stateFile)+".tmp*")
	if err != nil {
		return fmt.Errorf("vipalloc: state file: %w", err)
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 64<<10)
	b := make([]byte, 0, 256)
	_, werr := w.WriteString(`{"version":1,"vips":{`)
	first := true
	each(func(k hostName, v uint32) {
		b = b[:0]
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONName(b, k)
		b = append(b, ':', '"')
		b = u4(v).AppendTo(b)
		b = append(b, '"')
		if werr == nil {
			_, werr = w.Write(b)
		}
	})
	if werr == nil {
		_, werr = w.WriteString("}}\n")
	}
	if werr == nil {
		werr = w.Flush()
	}
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
