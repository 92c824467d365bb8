package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"time"
)

// readEnvelope reads what a key holds. Envelopes as this package writes them (encoding/json's
// form of envelope: its fields in order, the document in base64, times in RFC 3339) are read
// directly - a replica's start reads every key, and encoding/json's reflection was a fifth of
// its CPU -; anything else by encoding/json.
func readEnvelope(val []byte) (envelope, error) {
	if e, ok := readWritten(val); ok {
		return e, nil
	}
	var e envelope
	err := json.Unmarshal(val, &e)
	return e, err
}

// readWritten reads `{"doc":"B64","created":"T","modified":"T"[,"write":"HEX"]}`; false
// for anything else.
func readWritten(val []byte) (e envelope, ok bool) {
	rest, ok := bytes.CutPrefix(val, []byte(`{"doc":"`))
	if !ok {
		return e, false
	}
	doc, rest, ok := bytes.Cut(rest, []byte(`","created":"`))
	if !ok || bytes.ContainsAny(doc, `\"`) {
		return e, false
	}
	created, rest, ok := bytes.Cut(rest, []byte(`","modified":"`))
	if !ok {
		return e, false
	}
	modified, rest, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return e, false
	}
	switch {
	case string(rest) == "}":
	case bytes.HasPrefix(rest, []byte(`,"write":"`)) && bytes.HasSuffix(rest, []byte(`"}`)):
		w := rest[len(`,"write":"`) : len(rest)-2]
		if bytes.ContainsAny(w, `\"`) {
			return e, false
		}
		e.Write = string(w)
	default:
		return e, false
	}
	var err error
	if e.Created, err = time.Parse(time.RFC3339, string(created)); err != nil {
		return e, false
	}
	if e.Modified, err = time.Parse(time.RFC3339, string(modified)); err != nil {
		return e, false
	}
	e.Doc = make([]byte, base64.StdEncoding.DecodedLen(len(doc)))
	n, err := base64.StdEncoding.Decode(e.Doc, doc)
	if err != nil {
		return e, false
	}
	e.Doc = e.Doc[:n:n]
	return e, true
}
