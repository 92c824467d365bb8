package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"golang.org/x/sync/semaphore"

	"github.com/kumadp/kuma-dp/cp/store"
)

// What one write may cost the replica that takes it. Decoding is what costs: YAML that
// needs the YAML library (flow collections, anchors) takes 80-130 bytes of heap per byte
// of document, so a 2.7 MB body (read whole, decoded, then refused by the store) took a
// replica from 43 to 407 MB. A body is refused before it is decoded when it is over what
// the store keeps (MaxBody) or holds too many values (MaxValues); and writes decode within
// a budget of bytes (decodeBudget), so that concurrent large writes wait for each other
// instead of adding up.
const (
	// MaxBody is the largest body a write takes: the store's largest document.
	MaxBody = store.MaxDocBytes
	// MaxValues bounds a document's lines and commas (each a value to decode, or the most
	// a value takes): a 300 KB flow list of 150,000 numbers cost 100 MB to decode and
	// report on. What a write costs the whole replica (decoded by the API, by the store,
	// by what serves agents) grows with them: a VirtualOutbound of 30,000 flow-mapping
	// selectors (1 MiB) took a directory-store kuma-cp from 21 to 208 MB of memory, 16,000
	// (550 KB) to 98-201 MB, 8,000 (270 KB) to 71-90 MB. A Dataplane of 4,000 inbounds in
	// block YAML has about 8,000; Kuma's have a few.
	MaxValues = 1 << 13
	// decodeBudget is the bytes of documents decoded at once by one replica's API.
	decodeBudget = store.MaxDocBytes
)

// A list's page is bounded too (reads need no token): at most MaxPage resources (a size of
// 0 or more is that), and no more once pageBytes of documents are in it; the store is read
// listChunk resources at a time, so a page costs about pageBytes whatever the store holds.
const (
	MaxPage   = 1000
	pageBytes = 4 << 20
	listChunk = 100
)

// page is one page of a list: the resources after `after`, at most size (0: MaxPage), the
// key the next page starts after ("" on the last) and the revision of the first read.
func (s *Server) page(ctx context.Context, meshName, kind, after string, size int) (items []store.Item, next string, rev int64, err error) {
	if size <= 0 || size > MaxPage {
		size = MaxPage
	}
	n := 0
	for {
		chunk, more, r, err := s.Store.List(ctx, meshName, kind, after, min(size-len(items), listChunk))
		if err != nil {
			return nil, "", 0, err
		}
		if rev == 0 {
			rev = r
		}
		for i, it := range chunk {
			items, n = append(items, it), n+len(it.Doc)
			if n >= pageBytes && (i < len(chunk)-1 || more != "") {
				return items, it.Key.String(), rev, nil
			}
		}
		if more == "" || len(items) >= size {
			return items, more, rev, nil
		}
		after = more
	}
}

// MaxResponse bounds what the client reads of a response.
const MaxResponse = 4 << 20

// checkCost refuses a document over MaxBody or MaxValues, naming the bound, before it is
// decoded ("" when it is within them).
func checkCost(source string, doc []byte) string {
	if len(doc) > MaxBody {
		return fmt.Sprintf("%s: the document is %d bytes, over the %d a resource may hold", source, len(doc), MaxBody)
	}
	if n := bytes.Count(doc, []byte("\n")) + bytes.Count(doc, []byte(",")); n > MaxValues {
		return fmt.Sprintf("%s: the document has %d lines and commas, over the %d a resource may hold (each is a value to decode): split it", source, n, MaxValues)
	}
	return ""
}

// decoding is the decode budget of one Server: writes take their body's size of it while
// they decode and store, the largest (MaxBody) all of it.
type decoding struct{ sem *semaphore.Weighted }

func newDecoding() decoding { return decoding{semaphore.NewWeighted(decodeBudget)} }

// acquire waits for n bytes of the budget (n at least 1, at most all of it), or for the
// request to end.
func (d decoding) acquire(ctx context.Context, n int) (release func(), err error) {
	w := int64(min(max(n, 1), decodeBudget))
	if err := d.sem.Acquire(ctx, w); err != nil {
		return nil, err
	}
	return func() { d.sem.Release(w) }, nil
}

// readBody reads a write's body, refusing (413) one over MaxBody without reading more of
// it than that; code is the status answered when ok is false.
func readBody(w http.ResponseWriter, r *http.Request) (body []byte, code int, ok bool) {
	if r.ContentLength > MaxBody {
		fail(w, http.StatusRequestEntityTooLarge, "body too large",
			fmt.Sprintf("the document is %d bytes, over the %d a resource may hold", r.ContentLength, MaxBody))
		return nil, http.StatusRequestEntityTooLarge, false
	}
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		fail(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("a resource is at most %d bytes (%v)", MaxBody, err))
		return nil, http.StatusRequestEntityTooLarge, false
	}
	return b.Bytes(), 0, true
}
