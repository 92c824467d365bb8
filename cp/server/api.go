package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/gui"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
)

// readAdminToken reads --admin-token-file: the token writes through the API need.
func readAdminToken(path string) (string, error) {
	tok, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file %q: %w", path, err)
	}
	return strings.TrimSpace(string(tok)), nil
}

// serveDirAPI serves the API on the resources directory (--store dir with an admin token):
// writes land in the directory's files, which the directory source serves at its next poll.
func (c Config) serveDirAPI(ctx context.Context, cp *fanout.ControlPlane, log *slog.Logger) (*connlimit.HTTP, error) {
	tok, err := readAdminToken(c.Store.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	st, err := dirstore.NewStore(c.ResourcesDir)
	if err != nil {
		return nil, fmt.Errorf("--resources-dir: %w", err)
	}
	srv := &api.Server{Store: st, AdminToken: tok, Status: func() any {
		_, _, rev, _ := st.List(context.Background(), "", "", "", 1)
		return map[string]any{"store": "dir", "dir": c.ResourcesDir, "storeRevision": rev}
	}, Agents: func() []api.Agent { return api.MergeAgents(cp.AgentNames(), "", nil) }}
	port, err := connlimit.ListenHTTP(c.Store.APIAddress, c.Store.APIHTTP, apiHandler(srv, log))
	if err != nil {
		return nil, fmt.Errorf("--api-address %q: %w", c.Store.APIAddress, err)
	}
	port.Server.RegisterOnShutdown(srv.CloseEvents)
	go port.Serve(ctx)
	log.Info("API serving the resources directory", "api", port.Addr().String(), "gui", "http://"+port.Addr().String()+gui.Prefix+"/", "dir", c.ResourcesDir)
	return port, nil
}

// apiHandler is the API and, at /gui, the GUI reading it.
func apiHandler(srv *api.Server, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	api := srv.Handler()
	g := gui.New(api, buildinfo.Version, log.With("part", "gui")).Handler() // make build-cp stamps it
	mux.Handle(gui.Prefix, g)
	mux.Handle(gui.Prefix+"/", g)
	mux.Handle("/", api)
	return mux
}
