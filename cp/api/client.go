package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Client talks to the API (kuma-cp apply/get/delete).
type Client struct {
	URL   string // e.g. http://127.0.0.1:5681
	Token string
	HTTP  *http.Client
}

// NewClient is a client of the API at base.
func NewClient(base, token string) *Client {
	return &Client{URL: strings.TrimSuffix(base, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Error is an API error answer.
type Error struct {
	Status  int
	Title   string
	Details string
	// api: the body was the API's own error (not a proxy's or a mux's page).
	api bool
}

// NotFoundError is the API's answer that a resource is not there (Get, Delete): it reads as
// kumactl's error of a missing resource, naming the kind, the name (a route's name and
// namespace) and the mesh.
type NotFoundError struct {
	Kind, Mesh, Name string
	err              *Error
}

func (e *NotFoundError) Unwrap() error { return e.err }

func (e *NotFoundError) Error() string {
	if e.Kind == mesh.KindRoute || e.Kind == mesh.KindRouteBinding {
		i := strings.LastIndexByte(e.Name, '.')
		if i < 0 {
			return fmt.Sprintf("%s %q not found in mesh %q (a route is named NAME.NAMESPACE: give -n NAMESPACE)", e.Kind, e.Name, e.Mesh)
		}
		return fmt.Sprintf("%s %q not found in namespace %q of mesh %q", e.Kind, e.Name[:i], e.Name[i+1:], e.Mesh)
	}
	return fmt.Sprintf("%s %q not found in mesh %q", e.Kind, e.Name, e.Mesh)
}

// notFound is err as a NotFoundError when it is the API's 404 for the resource itself (not
// an unknown type, not another server's page).
func notFound(err error, meshName, typ, name string) error {
	var ae *Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.api && ae.Title != "unknown type" && Types[typ] != "" {
		return &NotFoundError{Kind: Types[typ], Mesh: meshName, Name: name, err: ae}
	}
	return err
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Title, e.Details) }

func (c *Client) do(ctx context.Context, method, path string, body []byte, ifMatch int64, out any) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if ifMatch > 0 {
		req.Header.Set("If-Match", strconv.FormatInt(ifMatch, 10))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (is kuma-cp serving its API there? --api-url)", method, c.URL+path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
	if resp.StatusCode >= 300 {
		var ae apiError
		fromAPI := true
		if json.Unmarshal(b, &ae) != nil || ae.Title == "" {
			// not the API's answer (a proxy, a mux's page): its status text and body
			fromAPI = false
			ae = apiError{Title: http.StatusText(resp.StatusCode), Details: strings.TrimSpace(string(b))}
			if ae.Details == "" {
				ae.Details = method + " " + c.URL + path
			}
		}
		return resp.Header, &Error{Status: resp.StatusCode, Title: ae.Title, Details: ae.Details, api: fromAPI}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, err
		}
	}
	return resp.Header, nil
}

func path(meshName, typ, name string) string {
	if typ == "meshes" && name != "" {
		meshName = name // a Mesh is stored in its own mesh
	}
	p := "/meshes/" + url.PathEscape(meshName) + "/" + typ
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// Get returns one resource (a *NotFoundError when it is not there).
func (c *Client) Get(ctx context.Context, meshName, typ, name string) (Resource, error) {
	var r Resource
	_, err := c.do(ctx, http.MethodGet, path(meshName, typ, name), nil, 0, &r)
	return r, notFound(err, meshName, typ, name)
}

// List returns every resource of a type in a mesh ("*": every mesh), following pages.
func (c *Client) List(ctx context.Context, meshName, typ string) ([]Resource, error) {
	var out []Resource
	next := path(meshName, typ, "") + "?size=500"
	seen := map[string]bool{}
	for next != "" {
		// A server (or a proxy in front of it) giving a page already read would be followed
		// until the command's timeout: stopped at once.
		if seen[next] {
			return nil, fmt.Errorf("list %s: the server's next page %s was read already (a paging loop)", typ, next)
		}
		seen[next] = true
		var l List
		if _, err := c.do(ctx, http.MethodGet, next, nil, 0, &l); err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		next = l.Next
	}
	return out, nil
}

// Delete removes a resource (a *NotFoundError when it is not there).
func (c *Client) Delete(ctx context.Context, meshName, typ, name string) error {
	_, err := c.do(ctx, http.MethodDelete, path(meshName, typ, name), nil, 0, nil)
	return notFound(err, meshName, typ, name)
}

// Applied is what Apply did with one resource.
type Applied struct {
	Type, Mesh, Name string
	Result           string // created, updated, unchanged
	// Kept names the fields stored as written that nothing here acts on (a Mesh's mtls...).
	Kept []string
}

// Source is one file (or standard input) to apply.
type Source struct {
	Name string // the file's name, for errors
	Data []byte
}

// Apply creates or updates every resource of data (multi-document YAML or JSON), each
// checked locally first (every error of the file at once, nothing written then): a resource
// is created, updated with the version read (a concurrent change gives 409, never a lost
// update), or left unchanged.
func (c *Client) Apply(ctx context.Context, source string, data []byte) ([]Applied, error) {
	return c.ApplyAll(ctx, []Source{{Name: source, Data: data}})
}

// ApplyAll is Apply of several files: every document of every file is checked before any is
// written (the problems of every file at once, nothing written then), then they are
// applied in order. Files without a single resource are an error.
func (c *Client) ApplyAll(ctx context.Context, sources []Source) ([]Applied, error) {
	var all []decoded
	var errs mesh.Errors
	for _, src := range sources {
		ds, es, err := decodeSource(src)
		if err != nil {
			return nil, err
		}
		all, errs = append(all, ds...), append(errs, es...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(all) == 0 {
		// kubectl's "no objects passed to apply": a wrong file or an empty directory is not
		// a success
		names := make([]string, len(sources))
		for i, src := range sources {
			names[i] = src.Name
		}
		return nil, fmt.Errorf("no resource in %s: nothing applied", strings.Join(names, ", "))
	}
	var out []Applied
	for _, d := range all {
		a, err := c.applyOne(ctx, d)
		if err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

// decoded is a resource of a file to apply and its document as written.
type decoded struct {
	r   mesh.Resource
	doc []byte
}

// decodeSource decodes a file to apply: its resources, or the problems found (mesh.Errors:
// validation and the API's bounds), or an error that stops the whole apply.
func decodeSource(src Source) ([]decoded, mesh.Errors, error) {
	data := fromAPIForm(src.Data)
	rs, err := mesh.Decode(src.Name, data)
	if err != nil {
		var es mesh.Errors
		if errors.As(err, &es) {
			return nil, es, nil
		}
		return nil, nil, err
	}
	// What is stored is each document as written (Kuma's form kept); the control plane
	// validates and serves what Decode makes of it.
	docs, err := mesh.Documents(data)
	if err == nil && len(docs) != len(rs) {
		err = fmt.Errorf("%d documents for %d resources", len(docs), len(rs))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", src.Name, err)
	}
	var out []decoded
	var errs mesh.Errors
	for i, r := range rs {
		// the API's bounds, checked here too: nothing is written when one is over
		if msg := checkCost(r.GetMeta().Source.String(), docs[i]); msg != "" {
			errs = append(errs, &mesh.FieldError{Kind: r.Kind(), Name: r.GetMeta().Name, Msg: msg})
			continue
		}
		out = append(out, decoded{r, docs[i]})
	}
	return out, errs, nil
}

// applyOne creates, updates (with the version read) or leaves unchanged one resource.
func (c *Client) applyOne(ctx context.Context, d decoded) (Applied, error) {
	r, doc := d.r, d.doc
	typ, meshName := TypeOf(r.Kind()), mesh.ResourceMesh(r.GetMeta())
	name := mesh.StoreName(r)
	a := Applied{Type: typ, Mesh: meshName, Name: name}
	if m, ok := r.(*mesh.Mesh); ok {
		a.Kept = m.KeptFields()
	}
	cur, err := c.Get(ctx, meshName, typ, name)
	var ae *Error
	var version int64
	switch {
	case err == nil:
		if sameDocument(cur.Spec, doc, r) {
			a.Result = "unchanged"
			return a, nil
		}
		version, a.Result = cur.Version, "updated"
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		a.Result = "created"
	default:
		return a, err
	}
	if _, err := c.do(ctx, http.MethodPut, path(meshName, typ, name), doc, version, nil); err != nil {
		return a, fmt.Errorf("%s %s/%s: %w", typ, meshName, name, err)
	}
	return a, nil
}

// fromAPIForm is a file in the API's form - what get -o json prints: one resource
// ({"mesh", "type": "dataplanes", ..., "resource": {...}}) or a list ({"total", "items": [...]}
// of those) - as the documents it holds, in order (multi-document YAML; JSON is YAML), so
// that get's output is applied back as it is. Any other file is returned unchanged: the
// type of the API's form is the URL's ("dataplanes"), never a resource's kind.
func fromAPIForm(data []byte) []byte {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return data
	}
	if doc, ok := apiDocument(trimmed); ok {
		return doc
	}
	var list struct {
		Total *int              `json:"total"`
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal(trimmed, &list) != nil || list.Total == nil || list.Items == nil {
		return data
	}
	var out []byte
	for i, item := range list.Items {
		doc, ok := apiDocument(item)
		if !ok {
			return data
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, doc...)
	}
	return out
}

// apiDocument is the document of one resource in the API's form (false when raw is not).
func apiDocument(raw []byte) ([]byte, bool) {
	var r struct {
		Type     string          `json:"type"`
		Resource json.RawMessage `json:"resource"`
	}
	if json.Unmarshal(raw, &r) != nil || Types[r.Type] == "" || len(r.Resource) == 0 {
		return nil, false
	}
	doc := []byte(r.Resource)
	var text string
	if json.Unmarshal(r.Resource, &text) == nil {
		doc = []byte(text) // a document that is YAML only, served as its text
	}
	if len(doc) == 0 || doc[len(doc)-1] != '\n' {
		doc = append(doc, '\n')
	}
	return doc, true
}

// sameDocument says whether the stored document cur (as the API serves it: JSON, or the
// text of a document that is YAML only) is the applied document doc, as written: the same
// fields and values whatever the key order, quoting or comments. A document that says the
// same in another form (Kuma's TrafficRoute split against the internal list) is another
// document: applying it stores it as written.
func sameDocument(cur, doc []byte, r mesh.Resource) bool {
	var text string
	if json.Unmarshal(cur, &text) == nil {
		cur = []byte(text)
	}
	a, err := mesh.DocumentJSON(cur)
	if err != nil {
		return false
	}
	b, err := mesh.DocumentJSON(doc)
	if err != nil {
		return false
	}
	norm := func(j []byte) []byte { return canonJSON(withoutStatus(j, r)) }
	if bytes.Equal(norm(a), norm(b)) {
		return true
	}
	if _, ok := r.(*mesh.Route); ok {
		// A route is stored as the control plane writes it (its status merged in):
		// compared in that form.
		rs, err := mesh.Decode("stored", cur)
		if err != nil || len(rs) != 1 {
			return false
		}
		stored, err1 := cplink.EncodeResource(rs[0])
		applied, err2 := cplink.EncodeResource(r)
		if err1 != nil || err2 != nil {
			return false
		}
		sj, _ := mesh.DocumentJSON(stored)
		aj, _ := mesh.DocumentJSON(applied)
		return bytes.Equal(norm(sj), norm(aj))
	}
	return false
}

// canonJSON is b as JSON with sorted keys, for comparing documents.
func canonJSON(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	out, _ := json.Marshal(v)
	return out
}

// withoutStatus is a stored route's or router's document without the status the control
// plane wrote, when the applied one has none (the user does not own it): applying the same
// route or router again is then "unchanged".
func withoutStatus(spec []byte, r mesh.Resource) []byte {
	switch rt := r.(type) {
	case *mesh.Route:
		if rt.Status != nil {
			return spec
		}
	case *mesh.Router:
		if rt.Status != nil {
			return spec
		}
	default:
		return spec
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(spec, &m) != nil {
		return spec
	}
	delete(m, "status")
	if string(m["creationTime"]) == `"0001-01-01T00:00:00Z"` {
		delete(m, "creationTime") // unset: written or left out
	}
	out, _ := json.Marshal(m)
	return out
}

// Status is GET /status as the API answers it (JSON), its errors as every request's.
func (c *Client) Status(ctx context.Context) ([]byte, error) {
	var st json.RawMessage
	if _, err := c.do(ctx, http.MethodGet, "/status", nil, 0, &st); err != nil {
		return nil, err
	}
	return st, nil
}
