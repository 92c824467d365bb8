package mesh

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ResourceFiles lists the resource files under dir (*.yaml, *.yml, *.json, any case),
// recursively, in lexical order: the files LoadDir and the agent's directory source read.
//
//   - dir may be a symbolic link to a directory (a mounted volume often is): it is followed.
//   - Entries whose name starts with ".." are skipped: a Kubernetes ConfigMap or Secret
//     volume keeps its real files in "..<timestamp>/" (and "..data" links to it) and shows
//     each of them through a symbolic link at the top, so reading those directories too
//     would load every resource twice.
//   - Symbolic links to files are read (that is how a ConfigMap volume shows its files);
//     links to directories below dir are not followed (no cycles).
//   - Named pipes, sockets and devices (or links to them) are errors, never read: reading a
//     pipe waits for a writer forever, a link to /dev/zero reads until memory runs out.
//
// A directory that cannot be read is an error naming it; the others are still listed.
func ResourceFiles(dir string) ([]string, Errors) {
	root := dir
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		root = dir + string(filepath.Separator) // WalkDir descends into a link given so
	}
	var paths []string
	var errs Errors
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, &FieldError{Source: path, Msg: err.Error()})
			return nil
		}
		if path != root && strings.HasPrefix(d.Name(), "..") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && isResourceFile(path) {
			if kind := irregular(path, d); kind != "" {
				errs = append(errs, &FieldError{Source: path, Msg: "not a regular file (" + kind + "): not read"})
				return nil
			}
			paths = append(paths, path)
		}
		return nil
	})
	if walkErr != nil {
		errs = append(errs, &FieldError{Source: dir, Msg: walkErr.Error()})
	}
	return paths, errs
}

// irregular names what path is when it is a named pipe, a socket or a device ("" for a
// regular file, or one that cannot be stat'ed: reading it then reports why). The directory
// entry's type tells without a system call; only a symbolic link is stat'ed.
func irregular(path string, d fs.DirEntry) string {
	mode := d.Type()
	if mode&fs.ModeSymlink != 0 {
		fi, err := os.Stat(path)
		if err != nil {
			return ""
		}
		mode = fi.Mode().Type()
	}
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "named pipe"
	case mode&fs.ModeSocket != 0:
		return "socket"
	case mode&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "device"
	case mode&fs.ModeIrregular != 0:
		return "irregular file"
	}
	return ""
}
