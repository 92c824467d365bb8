package dirsource

import (
	"crypto/sha256"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
)

// fingerprint summarises what a load would read: every path under dir (symlinks followed for
// their target's size and time, so a Kubernetes ConfigMap's "..data" swap shows) and the
// dataplane file. Equal fingerprints mean nothing on disk changed that a load would see,
// short of a same-size rewrite within the file system's time granularity.
func fingerprint(dataplaneFile, dir string) [32]byte {
	h := sha256.New()
	var buf [8]byte
	stamp := func(path string) {
		h.Write([]byte(path))
		h.Write([]byte{0})
		fi, err := os.Stat(path)
		if err != nil {
			h.Write([]byte("missing"))
			return
		}
		binary.LittleEndian.PutUint64(buf[:], uint64(fi.Size()))
		h.Write(buf[:])
		binary.LittleEndian.PutUint64(buf[:], uint64(fi.ModTime().UnixNano()))
		h.Write(buf[:])
		binary.LittleEndian.PutUint64(buf[:], uint64(fi.Mode()))
		h.Write(buf[:])
	}
	stamp(dataplaneFile)
	if dir != "" {
		_ = filepath.WalkDir(walkRoot(dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				h.Write([]byte(path + "\x00unreadable"))
				return nil
			}
			stamp(path)
			return nil
		})
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// walkRoot is dir as filepath.WalkDir must be given it to descend into it when dir itself is
// a symbolic link to a directory (WalkDir does not follow links, not even the root's): with
// a trailing separator the root resolves to the directory, and the paths below it are the
// same as dir's.
func walkRoot(dir string) string {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return dir + string(filepath.Separator)
	}
	return dir
}
