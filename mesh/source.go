package mesh

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"unique"
	"unsafe"
)

// Source is where a resource was read from, for error messages: a file (or another named
// origin, such as a control-plane key) and a document number in it, printed "file#doc"
// (e.g. "policies/vo.yaml#2"; document numbers start at 1). A mesh may hold 100,000
// Dataplanes, so a Source allocates nothing per resource: the file's name is interned
// (package unique) and shared by every resource read from it, and it goes with the last
// resource that names it (an origin of one resource, such as a control-plane key, is not
// kept for the rest of the process). A source of the model that keeps its files' names
// itself gives its resources those instead (In): an interned name costs ~200 bytes beside
// its text (the table's entry, its weak pointer and cleanup), one for every file of a
// directory of a file per dataplane.
//
// The zero Source is unknown and prints "". Sources compare with ==: equal Sources print
// the same text (Same tells Sources of the same text apart from the others).
type Source struct {
	file *string // the file's name, interned (NewSource) or its source's (In); nil: unknown
	doc  uint32  // document number from 1; 0: the file as a whole (printed without "#")
}

// NewSource is document doc (from 1; 0: the file as a whole) of file.
func NewSource(file string, doc int) Source {
	var s Source
	if file != "" || doc != 0 {
		s.file = interned(unique.Make(file))
	}
	return s.WithDoc(doc)
}

// interned is the string h stands for as package unique keeps it (a Handle is a pointer to
// it): held, it keeps the table's entry as h does, so the next NewSource of the same file
// gives the same pointer.
func interned(h unique.Handle[string]) *string { return *(**string)(unsafe.Pointer(&h)) }

// In is s in the file named *name, a string equal to s.File() that its caller keeps for the
// sources of that file's resources, instead of the interned name (s itself when the names
// differ, or name is nil).
func (s Source) In(name *string) Source {
	if s.file != nil && name != nil && s.file != name && *s.file == *name {
		s.file = name
	}
	return s
}

// SameFile reports whether s and t name their files with the same string (the same name
// interned, or given to In).
func (s Source) SameFile(t Source) bool { return s.file == t.file }

// Same reports whether s and t print the same text: the same document of files of the same
// name.
func (s Source) Same(t Source) bool {
	return s.doc == t.doc && (s.file == t.file || (s.file != nil && t.file != nil && *s.file == *t.file))
}

// File is the name of the source's file ("" for the zero Source).
func (s Source) File() string {
	if s.file == nil {
		return ""
	}
	return *s.file
}

// Doc is the source's document number (from 1), 0 for a whole file or the zero Source.
func (s Source) Doc() int { return int(s.doc) }

// WithDoc is document doc (from 1; 0: the file as a whole) of the same file.
func (s Source) WithDoc(doc int) Source {
	if doc < 0 || doc > math.MaxUint32 {
		panic("mesh: document number out of range: " + strconv.Itoa(doc))
	}
	s.doc = uint32(doc)
	return s
}

// IsZero reports whether s is the zero (unknown) Source.
func (s Source) IsZero() bool { return s == Source{} }

// String is "file#doc", "file" when the source has no document, "" for the zero Source.
func (s Source) String() string {
	if s.doc == 0 {
		return s.File()
	}
	return s.File() + "#" + strconv.FormatUint(uint64(s.doc), 10)
}

// MarshalText is String's text: a Source logged or marshalled on its own reads as it prints.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// GobEncode writes the document number and the file's name (ids are the process's own): the
// decode cache and the control-plane link's saved model keep their resources' sources.
func (s Source) GobEncode() ([]byte, error) {
	if s.IsZero() {
		return nil, nil
	}
	file := s.File()
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen32+len(file)), uint64(s.doc))
	return append(b, file...), nil
}

// GobDecode reads what GobEncode wrote.
func (s *Source) GobDecode(b []byte) error {
	if len(b) == 0 {
		*s = Source{}
		return nil
	}
	doc, n := binary.Uvarint(b)
	if n <= 0 || doc > math.MaxUint32 {
		return errors.New("mesh: bad encoded source")
	}
	*s = NewSource(string(b[n:]), int(doc))
	return nil
}
