package dirsource

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/kumadp/kuma-dp/mesh"
)

// pieceSize is the smallest piece worth decoding on its own core.
const pieceSize = 64 << 10

// pieceCount is how many pieces a file of size bytes is cut into (at most): two per core,
// one per MiB for a larger file.
func pieceCount(size, cores int) int { return max(2*cores, size>>20) }

// cutsBefore reports whether a piece of pieceLen bytes ends before line (a line of the file
// without its newline): a separator once the piece has its target length.
func cutsBefore(line []byte, pieceLen, target int) bool {
	return pieceLen >= target && mesh.IsSeparator(bytes.TrimRight(line, "\r"))
}

// splitPieces cuts data into at most n pieces of roughly equal size, each ending just
// before a document separator line, so that the pieces decode to the same documents as
// the whole. Small or single-document data is one piece.
func splitPieces(data []byte, n int) [][]byte {
	if n < 2 || len(data) < 2*pieceSize {
		return [][]byte{data}
	}
	target := max(len(data)/n, pieceSize)
	var pieces [][]byte
	start := 0
	for i := 0; i < len(data); {
		end := bytes.IndexByte(data[i:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += i
		}
		if cutsBefore(data[i:end], i-start, target) {
			pieces = append(pieces, data[start:i])
			start = i
		}
		i = end + 1
	}
	return append(pieces, data[start:])
}

// streamMin is the size from which a file is read a piece at a time (see decodeParallel).
const streamMin = 4 << 20

// streamPieces reads the file at path (size bytes, as stat'ed) a piece at a time, cut as
// splitPieces cuts a file read whole (a separator line starts the next piece), hands each
// piece to send (a buffer of its own, the caller's from then on), and returns the SHA-256
// of every byte read. An error of send stops it.
func streamPieces(path string, size int64, cores int, send func([]byte) error) (sum digest, err error) {
	f, _, err := openRegular(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	target := max(int(size)/pieceCount(int(size), cores), pieceSize)
	h := sha256.New()
	r := bufio.NewReaderSize(f, 64<<10)
	piece := make([]byte, 0, target+target/4)
	lineStart := true // line begins a line of the file (a long line comes in several reads)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a line longer than the buffer: the rest follows
			err = nil
		}
		if len(line) > 0 {
			h.Write(line)
			whole := lineStart && (line[len(line)-1] == '\n' || err == io.EOF)
			lineStart = line[len(line)-1] == '\n'
			if whole && cutsBefore(bytes.TrimRight(line, "\n"), len(piece), target) {
				if serr := send(piece); serr != nil {
					return sum, serr
				}
				piece = make([]byte, 0, target+target/4)
			}
			piece = append(piece, line...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, err
		}
	}
	if len(piece) > 0 || size == 0 {
		if err := send(piece); err != nil {
			return sum, err
		}
	}
	return digestSum(h), nil
}

// openRegular opens the file at path for reading, refusing one that is not a regular file:
// a file replaced by a named pipe since it was listed would otherwise hold the load in its
// open until a writer comes (opened without waiting, then checked). It returns the size
// the file has once open.
func openRegular(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		kind := "irregular file"
		switch m := fi.Mode(); {
		case m&fs.ModeNamedPipe != 0:
			kind = "named pipe"
		case m&fs.ModeSocket != 0:
			kind = "socket"
		case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			kind = "device"
		case m.IsDir():
			kind = "directory"
		}
		err = fmt.Errorf("not a regular file (%s): not read", kind)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// readRegular is os.ReadFile for a regular file only (see openRegular).
func readRegular(path string) ([]byte, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, 0, size+1) // +1: the read that finds the end does not grow it
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) { // grown since the stat
			data = append(data, 0)[:len(data)]
		}
	}
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path) // follows symlinks: a ConfigMap swap changes the target
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}
