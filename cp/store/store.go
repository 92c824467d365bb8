// Package store is the control plane's resource store: resources kept as documents under
// (mesh, type, name), each with a version (the store's revision of its last write), server-set
// creation and modification times, compare-and-set writes, paged lists and their counts, and
// a watch that resumes from a revision. It owns the Store interface and its etcd backend
// (go.etcd.io/etcd/client/v3: consensus, leases and watches are etcd's, never ours), the
// client set-up (NewClient), leader election on it, Presence (which names each replica
// holds, on its session's lease), Health (whether a quorum of etcd is reached, and which
// members answer) and SharedLists (one list of the whole store for a replica's followers of
// it).
//
// It never decodes or validates a document (package mesh does, before a write) and knows
// nothing of agents or DNS: it is general, for today's kinds and the next ones.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Key names one resource.
type Key struct {
	Mesh, Type, Name string
}

func (k Key) String() string { return k.Mesh + "/" + k.Type + "/" + k.Name }

// Item is one stored resource.
type Item struct {
	Key
	// Doc is the resource's document, as the writer gave it (YAML or JSON).
	Doc []byte
	// Version is the store revision of its last write: what a compare-and-set names.
	Version int64
	// Created and Modified are set by the store, never by the writer.
	Created, Modified time.Time
	// shared is what the readers of the shared list it came from compute of it once
	// (SharedLists, Shared); nil for an item of any other read.
	shared *sharedValue
}

// EventType says what happened to a resource.
type EventType int

const (
	Put EventType = iota + 1
	Delete
	// Relist: the watch could not resume from the revision asked (compacted away): list
	// everything again and watch from the list's revision.
	Relist
)

// Event is one change seen by a watch; Revision is the store revision it happened at.
type Event struct {
	Type     EventType
	Item     Item // for Delete, only the Key and Version are set
	Revision int64
}

// Any is the expected version of a write that does not care what it replaces.
const Any int64 = -1

// Errors a Store returns (wrapped, with context): test them with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("version conflict: the resource changed since it was read")
	ErrExists      = errors.New("already exists")
	ErrUnavailable = errors.New("store unavailable")
	// ErrInvalid: the store cannot hold the document under that key (a backend's own rule,
	// beyond the validation every write has already passed).
	ErrInvalid = errors.New("not storable")
	// ErrTooLarge: the document is over what the backend holds for one resource.
	ErrTooLarge = errors.New("too large")
)

// MaxDocBytes is the largest document the etcd backend stores for one resource: its key
// holds the document base64-encoded in an envelope, and etcd refuses a request over 1.5 MiB
// (--max-request-bytes) by default.
const MaxDocBytes = 1 << 20

// checkSize refuses a document over MaxDocBytes, naming its size and the limit.
func checkSize(k Key, doc []byte) error {
	if len(doc) > MaxDocBytes {
		return fmt.Errorf("store: %s: the document is %d bytes, over the %d a resource may hold: %w", k, len(doc), MaxDocBytes, ErrTooLarge)
	}
	return nil
}

// Store keeps resources.
type Store interface {
	// Get returns one resource, or ErrNotFound.
	Get(ctx context.Context, k Key) (Item, error)
	// List returns the resources of a mesh (all meshes when mesh is ""), of a type (all when
	// typ is ""), ordered by key, starting after the key `after` (paging), at most limit
	// (0: all); next is the key to pass as `after` for the next page ("" at the end); rev
	// is the store revision the list is consistent at (watch from it).
	List(ctx context.Context, mesh, typ, after string, limit int) (items []Item, next string, rev int64, err error)
	// Count is how many resources List(mesh, typ, "", 0) returns - every page of the list -
	// at the store revision rev (0: now; a backend without revisions counts now), without
	// reading them.
	Count(ctx context.Context, mesh, typ string, rev int64) (int, error)
	// Put writes a resource. expect is the version it replaces: 0 = create (ErrExists when
	// it exists), a version = update only if unchanged since (ErrConflict otherwise, or
	// ErrNotFound when it is gone), Any = create or replace.
	Put(ctx context.Context, k Key, doc []byte, expect int64) (Item, error)
	// Delete removes a resource, with expect as in Put (0 is not allowed: use Any).
	Delete(ctx context.Context, k Key, expect int64) error
	// Watch delivers every change after revision from, in order, until ctx ends; when from
	// was compacted away it delivers one Relist event and stops.
	Watch(ctx context.Context, from int64) <-chan Event
}

// ValidKeyPart reports whether s can be a mesh, type or name in a key.
func ValidKeyPart(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s: empty", what)
	}
	for _, r := range s {
		if r == '/' || r < ' ' {
			return fmt.Errorf("%s %q: no '/' or control characters", what, s)
		}
	}
	return nil
}
