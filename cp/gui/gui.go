// Package gui is the control plane's web GUI, served by kuma-cp at /gui on the API's
// address: an overview of the meshes and the control plane, each mesh's dataplanes (with
// the hostnames and VIPs each computes, by package vipalloc as the agent does, and the
// Envoy resources it would get), its policies, the router shards (a picture), and the
// shards' DNS zones. It is read-only.
//
// Pages are rendered on the server (html/template) from files embedded in the binary; a
// little JavaScript (static/gui.js, no library) refreshes an open page when GET /events says
// something changed. Every read goes through the API (package api's client, in process):
// the GUI shows what `kuma-cp get` would.
package gui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
)

//go:embed templates/*.html static/*
var files embed.FS

// Prefix is where the GUI is mounted.
const Prefix = "/gui"

// Server renders the GUI's pages from the API.
type Server struct {
	api     *api.Client
	version string
	log     *slog.Logger
	pages   map[string]*template.Template
	// timeout bounds the API reads of one page.
	timeout time.Duration
}

// New is the GUI reading the API served by apiHandler (in process: no connection, the same
// handler `kuma-cp get` reaches over HTTP). version is shown on the overview.
func New(apiHandler http.Handler, version string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cl := api.NewClient("http://api.internal", "")
	cl.HTTP = &http.Client{Transport: inProcess{apiHandler}, Timeout: 30 * time.Second}
	return &Server{api: cl, version: version, log: log, pages: parsePages(), timeout: 20 * time.Second}
}

// inProcess is an http.RoundTripper that serves each request with a handler.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// Handler serves the GUI's pages under Prefix, and its static files.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+Prefix+"/{$}", s.page("overview", s.overview))
	mux.HandleFunc("GET "+Prefix+"/meshes/{mesh}/dataplanes", s.page("dataplanes", s.dataplanes))
	mux.HandleFunc("GET "+Prefix+"/meshes/{mesh}/dataplanes/{name}", s.page("dataplane", s.dataplane))
	mux.HandleFunc("GET "+Prefix+"/meshes/{mesh}/dataplanes/{name}/envoy.json", s.envoyJSON)
	mux.HandleFunc("GET "+Prefix+"/meshes/{mesh}/policies", s.page("policies", s.policies))
	mux.HandleFunc("GET "+Prefix+"/meshes/{mesh}/routers", s.page("routers", s.routers))
	mux.HandleFunc("GET "+Prefix+"/zones", s.page("zones", s.zones))
	mux.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
	})
	return secured(mux)
}

// secured sets the headers every answer gets: nothing but the GUI's own files may run or
// load (no inline script or style, no other origin), and no page is framed.
func secured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// view is what a page's template gets: the page's own data and what the layout shows.
type view struct {
	Title   string
	Mesh    string
	Nav     string // the page's place in the navigation
	Version string
	Data    any
}

// pageFunc reads what a page shows: its title, the mesh it is of ("" for none) and its data.
type pageFunc func(ctx context.Context, r *http.Request) (title, mesh string, data any, err error)

// httpError is an error with the status a page answers.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// page renders template name with what read gives; an error is a page of its own, with
// the status the API answered (404 for a missing resource) or 502.
func (s *Server) page(name string, read pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		title, meshName, data, err := read(ctx, r)
		v := view{Title: title, Mesh: meshName, Nav: name, Version: s.version, Data: data}
		code, tmpl := http.StatusOK, name
		if err != nil {
			code = statusOf(err)
			v.Title, v.Data, tmpl = "Error", err.Error(), "error"
			s.log.Debug("gui: page failed", "path", r.URL.Path, "error", err)
		}
		var buf bytes.Buffer
		if err := s.pages[tmpl].ExecuteTemplate(&buf, "layout", v); err != nil {
			s.log.Error("gui: rendering", "page", tmpl, "error", err)
			http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = buf.WriteTo(w)
	}
}

// statusOf is the status a page answers for err: a bad query's 400, the API's own status
// when it answered (a missing resource's 404), else 502.
func statusOf(err error) int {
	var he *httpError
	var ae *api.Error
	var nf *api.NotFoundError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.As(err, &nf):
		return http.StatusNotFound
	case errors.As(err, &ae):
		return ae.Status
	}
	return http.StatusBadGateway
}
