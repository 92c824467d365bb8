// Package cplink owns the control-plane link - incremental ADS from a control plane such as
// cmd/kuma-cp (docs/cplink.md): the Client and its configuration (client.go), a session's
// stream, keepalive and reconnection (session.go), the responses taken into the model
// (responses.go), the resources' wire form (wire.go) and the model saved for a restart
// (saved.go) - and what every source of the mesh model shares: the Source contract and its
// Update (this file), the dataplane file's {{ name }} placeholders (vars.go) and the cache
// files a source keeps between runs (cachefile.go). The directory source (files on disk,
// watched) is package dirsource.
//
// A source produces mesh.Snapshots, or refusals carrying the validation errors; it never
// allocates VIPs, answers DNS or builds Envoy resources, and it never decides whether a
// refused change replaces what is serving (the agent keeps the last good model). The
// directory source refuses a file alone where it can: its model is built with that file at
// its last good version, which the Update names (Refused).
package cplink

import (
	"context"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// Update is one result of a source: a new Snapshot (with the files it was built without,
// Refused), or the reason a change was refused.
type Update struct {
	// Snapshot is the model loaded; nil when Err is set.
	Snapshot *mesh.Snapshot
	// Err is why the change was refused (often mesh.Errors naming file, field and value).
	Err error
	// Trigger says what caused the load: "start", "watch", "poll" or "reload".
	Trigger string
	// Took is how long loading and validating took.
	Took time.Duration
	// Stale: the model is the one saved at the last sync, served because the source could
	// not be reached yet; a later update without Stale confirms or replaces it.
	Stale bool
	// Refused lists the files whose newest content was refused while Snapshot was built
	// from the others (the directory source): each is served at its last good version, or
	// left out when it never had one.
	Refused []RefusedFile
}

// RefusedFile is one file refused in an update that still carries a model.
type RefusedFile struct {
	Path string
	// Kept: the file's last good version is served; false when it never had one (a new
	// file, or one broken since the agent started), and it is left out.
	Kept bool
	// Narrowed: the last good version served was kept for another list of the dataplane's
	// reachable services, one without some reachable now: the file's dataplanes of those
	// are missing from it until the file is accepted again.
	Narrowed bool
	// Err is why (often mesh.Errors naming the field and value).
	Err error
}

// Source is what the agent runs to learn the model: Load once at start (a source that has
// to wait for its first model, e.g. a control plane's first complete sync, blocks until
// then or until ctx is cancelled), then Run delivers every later change on out until ctx
// is cancelled. Reload asks for a load now (SIGHUP).
type Source interface {
	Load(ctx context.Context) Update
	Run(ctx context.Context, out chan<- Update) error
	Reload()
}
