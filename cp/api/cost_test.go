package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// flowList is a Dataplane whose inbounds are a flow list of n numbers: the costliest YAML
// to decode per byte (the YAML library, and an error per item).
func flowList(n int) string {
	return "type: Dataplane\nmesh: default\nname: big\nnetworking:\n  address: 10.0.0.1\n  inbound: [" + strings.Repeat("1,", n) + "1]\n"
}

// A write over the bounds is refused with 413 naming the bound before it is decoded: a
// 2.7 MB body allocated about 360 MB (decoded whole, then refused by the store), a 300 KB
// flow list of 150,000 numbers about 100 MB. Each now costs little more than its bytes.
func TestCostlyWritesRefusedBeforeDecoding(t *testing.T) {
	cl := dirAPI(t, t.TempDir())
	p := "/meshes/default/dataplanes/big"
	for _, tc := range []struct {
		doc, want string
		within    uint64
	}{
		{flowList(1_350_000), strconv.Itoa(MaxBody), 16 << 20},
		{flowList(150_000), "lines and commas", 16 << 20},
	} {
		var code int
		var body string
		alloc := testutil.HeapAllocated(func() {
			resp, b := put(t, cl, p, tc.doc, token, "")
			code, body = resp.StatusCode, b
		})
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, tc.want) {
			t.Errorf("a %d-byte document: %d %.300s, want 413 naming %q", len(tc.doc), code, body, tc.want)
		}
		t.Logf("a %d-byte document: %d, %d KB allocated", len(tc.doc), code, alloc>>10)
		if alloc > tc.within {
			t.Errorf("a %d-byte document refused after allocating %d MB, want at most %d MB", len(tc.doc), alloc>>20, tc.within>>20)
		}
	}
}

// gatedStore is a store whose Put waits for release, counting the Puts started.
type gatedStore struct {
	store.Store
	started atomic.Int32
	release chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, k store.Key, doc []byte, expect int64) (store.Item, error) {
	g.started.Add(1)
	<-g.release
	return g.Store.Put(ctx, k, doc, expect)
}

// Large writes decode one after another: the second of two 600 KB writes is not decoded
// (nor stored) while the first holds the decode budget.
func TestLargeWritesDecodeInTurn(t *testing.T) {
	dir, err := dirstore.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: dir, release: make(chan struct{})}
	srv := httptest.NewServer((&Server{Store: g, AdminToken: token}).Handler())
	t.Cleanup(srv.Close)
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.release) }) }
	t.Cleanup(open) // before srv.Close: a failed test leaves no write waiting
	cl := NewClient(srv.URL, token)
	big := func(name string) string {
		return strings.Replace(voDoc, "name: by-version", "name: "+name, 1) + "# " + strings.Repeat("x", 600<<10) + "\n"
	}
	done := make(chan int, 2)
	for _, name := range []string{"one", "two"} {
		go func() {
			resp, _ := put(t, cl, "/meshes/default/virtualoutbounds/"+name, big(name), token, "")
			done <- resp.StatusCode
		}()
	}
	waitStarted := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for g.started.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes reached the store, want %d", g.started.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitStarted(1)
	time.Sleep(300 * time.Millisecond) // the second write's decode, were it not waiting, is done by then
	if n := g.started.Load(); n != 1 {
		t.Fatalf("%d large writes decoded and stored at once, want 1", n)
	}
	g.release <- struct{}{}
	waitStarted(2)
	open()
	for range 2 {
		if code := <-done; code != http.StatusCreated {
			t.Errorf("write: %d", code)
		}
	}
}

// apply checks the API's bounds on every document before writing any: a file whose second
// document is over them names it, and the first is not written either.
func TestApplyChecksTheBoundsFirst(t *testing.T) {
	dir := t.TempDir()
	cl := dirAPI(t, dir)
	var big strings.Builder
	big.WriteString("type: Dataplane\nmesh: default\nname: big\nnetworking:\n  address: 10.0.0.1\n  inbound:\n")
	for i := 0; big.Len() < MaxBody+1; i++ {
		fmt.Fprintf(&big, "  - port: %d\n    tags: {kuma.io/service: s%d}\n", 1+i%60000, i)
	}
	_, err := cl.Apply(context.Background(), "two.yaml", []byte(voDoc+"---\n"+big.String()))
	if err == nil || !strings.Contains(err.Error(), `dataplane "big"`) || !strings.Contains(err.Error(), strconv.Itoa(MaxBody)) {
		t.Fatalf("apply of a document over the bounds: %v", err)
	}
	if items, err := cl.List(context.Background(), "default", "virtualoutbounds"); err != nil || len(items) != 0 {
		t.Fatalf("written before the check: %v %v", items, err)
	}
}

// sliceStore lists items kept in key order, noting the limit of every read.
type sliceStore struct {
	store.Store
	items  []store.Item
	limits []int
}

func (s *sliceStore) List(_ context.Context, _, _, after string, limit int) ([]store.Item, string, int64, error) {
	s.limits = append(s.limits, limit)
	i := 0
	for i < len(s.items) && after != "" && s.items[i].Key.String() <= after {
		i++
	}
	end := len(s.items)
	if limit > 0 && i+limit < end {
		end = i + limit
	}
	next := ""
	if end < len(s.items) {
		next = s.items[end-1].Key.String()
	}
	return s.items[i:end], next, 7, nil
}

func (s *sliceStore) Count(context.Context, string, string, int64) (int, error) {
	return len(s.items), nil
}

// A list's page is bounded whatever is asked (reads need no token): at most MaxPage
// resources (size 0 listed the whole store in one answer), no more once 4 MiB of documents
// are in it, the store read a chunk at a time; the next links still give every resource
// once.
func TestListPageBounded(t *testing.T) {
	st := &sliceStore{}
	for i := range 2500 {
		doc := "type: Dataplane\nmesh: default\nname: dp\n"
		if i >= 2000 { // the last 500: 40 KB each, 20 MB in all
			doc += "# " + strings.Repeat("x", 40<<10) + "\n"
		}
		st.items = append(st.items, store.Item{Key: store.Key{Mesh: "default", Type: "Dataplane", Name: fmt.Sprintf("dp-%05d", i)}, Doc: []byte(doc)})
	}
	srv := httptest.NewServer((&Server{Store: st}).Handler())
	t.Cleanup(srv.Close)
	next, seen, pages := "/meshes/default/dataplanes", 0, 0
	for next != "" && pages < 50 {
		resp, err := http.Get(srv.URL + next)
		if err != nil {
			t.Fatal(err)
		}
		var l List
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > MaxPage {
			t.Errorf("page %d: %d resources, over %d", pages, len(l.Items), MaxPage)
		}
		bytes := 0
		for _, it := range l.Items {
			bytes += len(it.Spec)
		}
		if bytes > pageBytes+(41<<10) {
			t.Errorf("page %d: %d bytes of documents", pages, bytes)
		}
		seen, next, pages = seen+len(l.Items), l.Next, pages+1
	}
	if seen != len(st.items) || pages < 5 {
		t.Errorf("%d resources in %d pages, want all %d in pages of at most %d resources or 4 MiB", seen, pages, len(st.items), MaxPage)
	}
	for _, n := range st.limits {
		if n <= 0 || n > listChunk {
			t.Fatalf("the store was asked for %d resources at once: %v", n, st.limits)
		}
	}
}

// A body of unknown length (chunked) over MaxBody is refused once MaxBody is read, not read
// whole.
func TestChunkedBodyOverTheLimitRefused(t *testing.T) {
	cl := dirAPI(t, t.TempDir())
	body := io.MultiReader(strings.NewReader(voDoc+"# "), io.LimitReader(neverEnding('x'), 64<<20))
	req, _ := http.NewRequest(http.MethodPut, cl.URL+"/meshes/default/virtualoutbounds/by-version", body)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 64 MiB chunked body: %d", resp.StatusCode)
	}
}

// neverEnding reads as the same byte for ever.
type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
