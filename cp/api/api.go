// Package api is the control plane's HTTP write API, in the shape of Kuma's REST API:
// GET/PUT/DELETE /meshes/{mesh}/{type}/{name} and GET /meshes/{mesh}/{type} (paged), with
// YAML or JSON bodies. Every write is decoded and validated by package mesh (the agent's own
// code) and refused with 400 naming file, field and value; writes carry the version they
// replace (If-Match) and a stale one gets 409; a store without quorum gives 503; an admin
// token guards writes. What one request may cost is bounded (cost.go): a write's size and
// values, the bytes decoded at once, a list page's resources and bytes.
//
// It owns the HTTP shape and the status codes, GET /agents (the agents connected to any
// replica: inspect.go), and the client kuma-cp's apply, get, delete, describe and inspect
// use (client.go; their command lines' checks: cli.go; what they print: print.go, table.go
// for kumactl's columns, routeview.go); storing is package store's (etcd) or package
// dirstore's (a directory), validating package mesh's.
package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
	cptoken "github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/mesh"
)

// Types maps the URL's type (Kuma's plural, lower case) to the resource kind.
var Types = map[string]string{
	"dataplanes":           mesh.KindDataplane,
	"virtualoutbounds":     mesh.KindVirtualOutbound,
	"trafficroutes":        mesh.KindTrafficRoute,
	"meshexternalservices": mesh.KindMeshExternalService,
	"hostnamegenerators":   mesh.KindHostnameGenerator,
	"meshservices":         mesh.KindMeshService,
	"meshtcproutes":        mesh.KindMeshTCPRoute,
	"meshhttproutes":       mesh.KindMeshHTTPRoute,
	"routers":              mesh.KindRouter,
	"routes":               mesh.KindRoute,
	"routebindings":        mesh.KindRouteBinding,
	"meshes":               mesh.KindMesh, // a Mesh is stored in its own mesh: /meshes/NAME/meshes/NAME
}

// TypeOf is the URL type of a kind ("" when unknown).
func TypeOf(kind string) string {
	for t, k := range Types {
		if k == kind {
			return t
		}
	}
	return ""
}

// Server is the API's handler.
type Server struct {
	Store store.Store
	// AdminToken guards writes (Authorization: Bearer <token>); empty refuses every write.
	AdminToken string
	// Status, when set, is served at GET /status (the replica, the leader...).
	Status func() any
	// Agents, when set, is served at GET /agents: the dataplanes whose agents are connected
	// now, to this replica or another (MergeAgents).
	Agents func() []Agent
	// Zones, when set, is the router shards' zones as served, at GET /zones.
	Zones func() *authdns.Catalog
	// AgentsEvery is how often GET /events looks for agents come and gone (0: 500 ms).
	AgentsEvery time.Duration

	events events
	mu     sync.Mutex
	writes map[int]uint64 // by status code, for metrics

	decodeOnce sync.Once
	decoding   decoding // the bytes decoded at once (cost.go)
}

// Writes returns the count of writes by HTTP status code.
func (s *Server) Writes() map[int]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]uint64, len(s.writes))
	for k, v := range s.writes {
		out[k] = v
	}
	return out
}

// Resource is a resource as the API shows it: the document as JSON with the store's
// version and times.
type Resource struct {
	Mesh             string          `json:"mesh"`
	Type             string          `json:"type"`
	Name             string          `json:"name"`
	Version          int64           `json:"version"`
	CreationTime     time.Time       `json:"creationTime"`
	ModificationTime time.Time       `json:"modificationTime"`
	Spec             json.RawMessage `json:"resource"`
}

// Document is the resource's document as stored: Spec, or the text Spec holds when the
// document is YAML only (an unquoted {{ name }} template is no JSON: served as its text).
func (r Resource) Document() []byte {
	var text string
	if json.Unmarshal(r.Spec, &text) == nil {
		return []byte(text)
	}
	return r.Spec
}

// List is a page of resources: Total counts every page's (the resources matching the
// list), Next is the next page's path ("" on the last).
type List struct {
	Total int        `json:"total"`
	Items []Resource `json:"items"`
	Next  string     `json:"next,omitempty"`
}

// Handler is the API's routes.
func (s *Server) Handler() http.Handler {
	s.decodeOnce.Do(func() { s.decoding = newDecoding() })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /meshes/{mesh}/{type}/{name}", s.get)
	mux.HandleFunc("PUT /meshes/{mesh}/{type}/{name}", s.counted(s.put))
	mux.HandleFunc("DELETE /meshes/{mesh}/{type}/{name}", s.counted(s.delete))
	mux.HandleFunc("GET /meshes/{mesh}/{type}", s.list)
	mux.HandleFunc("GET /agents", s.agents)
	mux.HandleFunc("GET /mesh-insights", s.meshInsights)
	mux.HandleFunc("GET /meshes/{mesh}/dataplanes+insights", s.dataplaneInsights)
	mux.HandleFunc("GET /zones", s.zones)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		if s.Status == nil {
			fail(w, http.StatusNotFound, "no status", "")
			return
		}
		writeJSON(w, http.StatusOK, s.Status())
	})
	return mux
}

type apiError struct {
	Title   string `json:"title"`
	Details string `json:"details"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, title, details string) {
	writeJSON(w, code, apiError{Title: title, Details: details})
}

// storeError answers a store error with its status: 404, 409, 400, 413, 503, else 500.
func storeError(w http.ResponseWriter, err error) int {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, store.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, store.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrExists):
		code = http.StatusConflict
	case errors.Is(err, store.ErrUnavailable):
		code = http.StatusServiceUnavailable
	}
	fail(w, code, http.StatusText(code), err.Error())
	return code
}

func (s *Server) key(w http.ResponseWriter, r *http.Request) (store.Key, bool) {
	kind, ok := Types[r.PathValue("type")]
	if !ok {
		fail(w, http.StatusNotFound, "unknown type", fmt.Sprintf("type %q is not one of dataplanes, virtualoutbounds, trafficroutes, meshexternalservices, hostnamegenerators, meshservices, meshtcproutes, meshhttproutes, routers, routes, routebindings, meshes", r.PathValue("type")))
		return store.Key{}, false
	}
	return store.Key{Mesh: r.PathValue("mesh"), Type: kind, Name: r.PathValue("name")}, true
}

func toResource(it store.Item) Resource {
	spec, err := yaml.YAMLToJSON(it.Doc)
	if err != nil {
		spec, _ = json.Marshal(string(it.Doc))
	}
	return Resource{Mesh: it.Mesh, Type: TypeOf(it.Type), Name: it.Name, Version: it.Version,
		CreationTime: it.Created, ModificationTime: it.Modified, Spec: spec}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	k, ok := s.key(w, r)
	if !ok {
		return
	}
	it, err := s.Store.Get(r.Context(), k)
	if err != nil {
		if (k.Type == mesh.KindRoute || k.Type == mesh.KindRouteBinding) && !strings.Contains(k.Name, ".") && errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w (a route is named NAME.NAMESPACE: %s.<namespace>)", err, k.Name)
		}
		storeError(w, err)
		return
	}
	w.Header().Set("ETag", etag(it.Version))
	writeJSON(w, http.StatusOK, toResource(it))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	kind, ok := Types[r.PathValue("type")]
	if !ok {
		fail(w, http.StatusNotFound, "unknown type", fmt.Sprintf("type %q is unknown", r.PathValue("type")))
		return
	}
	size := 0
	if v := r.URL.Query().Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail(w, http.StatusBadRequest, "bad size", fmt.Sprintf("size %q: want a whole number", v))
			return
		}
		size = n
	}
	meshName := r.PathValue("mesh")
	if meshName == "*" {
		meshName = ""
	}
	after := r.URL.Query().Get("after")
	items, next, rev, err := s.page(r.Context(), meshName, kind, after, size)
	if err != nil {
		storeError(w, err)
		return
	}
	out := List{Items: []Resource{}, Total: len(items)}
	for _, it := range items {
		out.Items = append(out.Items, toResource(it))
	}
	if after != "" || next != "" {
		// total is every page's (as Kuma's API): counted by the store, at the page's revision
		if out.Total, err = s.Store.Count(r.Context(), meshName, kind, rev); err != nil {
			storeError(w, err)
			return
		}
	}
	if next != "" {
		out.Next = fmt.Sprintf("%s?size=%d&after=%s", r.URL.EscapedPath(), size, url.QueryEscape(next))
	}
	writeJSON(w, http.StatusOK, out)
}

// authorized checks the admin token of a write.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	got, bearer := cptoken.FromBearer(r.Header.Get("Authorization"))
	if s.AdminToken == "" || !bearer || subtle.ConstantTimeCompare([]byte(got), []byte(s.AdminToken)) != 1 {
		fail(w, http.StatusUnauthorized, "admin token required", "writes need Authorization: Bearer <admin token> (kuma-cp ... --admin-token-file)")
		return false
	}
	return true
}

// etag is a version as an entity tag: quoted (RFC 9110 8.8.3).
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// expected is the version a write replaces: If-Match, or (absent) create only for PUT and
// any for DELETE.
func expected(w http.ResponseWriter, r *http.Request, absent int64) (int64, bool) {
	v := strings.Trim(r.Header.Get("If-Match"), `"`)
	if v == "" {
		return absent, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		fail(w, http.StatusBadRequest, "bad If-Match", fmt.Sprintf("If-Match %q: want the version read (a positive number)", v))
		return 0, false
	}
	return n, true
}

func (s *Server) count(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writes == nil {
		s.writes = map[int]uint64{}
	}
	s.writes[code]++
}

// counted runs a write and counts its status code.
func (s *Server) counted(write func(http.ResponseWriter, *http.Request) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.count(write(w, r)) }
}

// target is what every write starts with: the admin token, the resource's key and the
// version it replaces (absent: the default for the method); code is the status already
// answered when ok is false.
func (s *Server) target(w http.ResponseWriter, r *http.Request, absent int64) (k store.Key, expect int64, code int, ok bool) {
	if !s.authorized(w, r) {
		return k, 0, http.StatusUnauthorized, false
	}
	if k, ok = s.key(w, r); !ok {
		return k, 0, http.StatusNotFound, false
	}
	if expect, ok = expected(w, r, absent); !ok {
		return k, 0, http.StatusBadRequest, false
	}
	return k, expect, 0, true
}

func (s *Server) put(w http.ResponseWriter, r *http.Request) int {
	k, expect, code, ok := s.target(w, r, 0)
	if !ok {
		return code
	}
	body, code, ok := readBody(w, r)
	if !ok {
		return code
	}
	if msg := checkCost(sourceOf(k), body); msg != "" {
		fail(w, http.StatusRequestEntityTooLarge, "document too large", msg)
		return http.StatusRequestEntityTooLarge
	}
	release, err := s.decoding.acquire(r.Context(), len(body))
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "request ended", err.Error())
		return http.StatusServiceUnavailable
	}
	defer release()
	if msg := Check(k, body); msg != "" {
		fail(w, http.StatusBadRequest, "invalid resource", msg)
		return http.StatusBadRequest
	}
	switch k.Type {
	case mesh.KindRouteBinding:
		if r.Method == http.MethodPut && expect != 0 {
			fail(w, http.StatusConflict, "bindings are not updated", "a RouteBinding is only created (delete the route's binding to schedule it again)")
			return http.StatusConflict
		}
		return s.bind(w, r, k, body)
	case mesh.KindRoute, mesh.KindRouter:
		doc, code, msg := s.statusWrite(r.Context(), k, body, expect)
		if code == -1 {
			return storeError(w, errors.New(msg))
		}
		if msg != "" {
			fail(w, code, "invalid resource", msg)
			return code
		}
		body = doc
	}
	it, err := s.Store.Put(r.Context(), k, body, expect)
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			fail(w, http.StatusConflict, "exists", err.Error()+": to replace it, send the version read as If-Match")
			return http.StatusConflict
		}
		return storeError(w, err)
	}
	code = http.StatusOK
	if expect == 0 {
		code = http.StatusCreated
	}
	w.Header().Set("ETag", etag(it.Version))
	writeJSON(w, code, toResource(it))
	return code
}

// Check decodes and validates a document for key k with package mesh (the agent's code):
// one resource, of k's type, name and mesh. It returns the problem ("" when none), naming
// file, field and value.
func Check(k store.Key, doc []byte) string {
	source := sourceOf(k)
	rs, err := mesh.Decode(source, doc)
	if err != nil {
		return err.Error()
	}
	if len(rs) != 1 {
		return fmt.Sprintf("%s: want one resource, got %d", source, len(rs))
	}
	res := rs[0]
	m := res.GetMeta()
	switch {
	case res.Kind() != k.Type:
		return fmt.Sprintf("%s: type: the document is a %s (value %q)", source, res.Kind(), res.Kind())
	case mesh.StoreName(res) != k.Name:
		return fmt.Sprintf("%s: name: the document names %q, the URL %q", source, mesh.StoreName(res), k.Name)
	case !mesh.Meshless(res) && mesh.ResourceMesh(m) != k.Mesh:
		return fmt.Sprintf("%s: mesh: the document is of mesh %q, the URL %q", source, mesh.ResourceMesh(m), k.Mesh)
	case mesh.Meshless(res) && k.Mesh != mesh.ResourceMesh(m):
		// One copy for every mesh, where apply writes it: two would be served as one name.
		return fmt.Sprintf("%s: mesh: a %s without a mesh applies to every mesh and is stored under mesh %q, not %q (or give it a mesh)", source, res.Kind(), mesh.ResourceMesh(m), k.Mesh)
	}
	return ""
}

// sourceOf names a write's document in errors: mesh/type/name.
func sourceOf(k store.Key) string { return fmt.Sprintf("%s/%s/%s", k.Mesh, TypeOf(k.Type), k.Name) }

func (s *Server) delete(w http.ResponseWriter, r *http.Request) int {
	k, expect, code, ok := s.target(w, r, store.Any)
	if !ok {
		return code
	}
	if err := s.Store.Delete(r.Context(), k, expect); err != nil {
		return storeError(w, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}
