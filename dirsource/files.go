package dirsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Watch modes of the directory source.
const (
	WatchAuto    = "auto"    // inotify, falling back to polling when inotify is unavailable
	WatchInotify = "inotify" // inotify only: failing to set it up is an error
	WatchPoll    = "poll"    // stat every PollInterval
)

// FilesConfig configures the directory source.
type FilesConfig struct {
	// DataplaneFile is this dataplane's resource; PoliciesDir holds the other resources
	// (policies and the other dataplanes), read recursively.
	DataplaneFile string
	PoliciesDir   string
	// Watch is WatchAuto (default), WatchInotify or WatchPoll.
	Watch string
	// Debounce folds a burst of file events into one load (default 100 ms).
	Debounce time.Duration
	// PollInterval is how often the polling fallback looks (default 500 ms, so a change is
	// seen within a second). With inotify, a fingerprint check still runs every
	// 10 x PollInterval to catch what inotify cannot see (some network file systems). A
	// look that takes long (a directory of 100,000 files) spaces the next ones out so that
	// checking takes at most a twentieth of a core (pollEvery).
	PollInterval time.Duration
	// DataplaneVars fill the dataplane file's `{{ name }}` placeholders (Kuma's
	// --dataplane-var), e.g. the pod IP; a placeholder without a value is an error.
	DataplaneVars map[string]string
	// CacheDir, when set, is a directory that keeps decoded files across restarts, one
	// entry per file (see persist.go); only used by the default loader. The agent puts it
	// in its work dir. The previous format's single file, CacheDir + ".gob", is never
	// read and is removed at the first write.
	CacheDir string
	// MaxFileBytes refuses a file larger than this (default DefaultMaxFileBytes) and
	// MaxTotalBytes a model whose files are larger than this in all (default
	// DefaultMaxTotalBytes), before reading them; a negative value sets no limit. Only used
	// by the default loader.
	MaxFileBytes, MaxTotalBytes int64
	// Load reads and validates the model. Default: mesh.Load's rules, decoding only the
	// files that changed since the last load, each refused file served at its last good
	// version (see dirLoader); a snapshot returned with a *RefusedFiles error is served.
	Load func(dataplaneFile, policiesDir string) (*mesh.Snapshot, error)
}

// Files is the directory source: the model comes from a dataplane file and a directory.
type Files struct {
	cfg    FilesConfig
	loader *dirLoader // the default loader, when FilesConfig.Load is nil
	log    *slog.Logger
	reload chan struct{}
	// seen is the fingerprint of what the last load read; owned by the caller of Load
	// before Run starts and by Run afterwards.
	seen [32]byte
	fp   fingerprinter
}

// The default size limits: a policy file of 32 MiB is already ~200,000 dataplanes, and
// decoding one costs about 30 times its size in memory for a moment.
const (
	DefaultMaxFileBytes  = 32 << 20
	DefaultMaxTotalBytes = 128 << 20
)

func limit(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0 // none
	}
	return v
}

// NewFiles returns the directory source. It reads nothing until Load or Run.
func NewFiles(cfg FilesConfig, log *slog.Logger) (*Files, error) {
	if cfg.DataplaneFile == "" {
		return nil, errors.New("files source: no dataplane file given")
	}
	// Clean paths, so that the directories inotify reports compare with them
	// ("policies/" and "policies" are one directory).
	cfg.DataplaneFile = filepath.Clean(cfg.DataplaneFile)
	if cfg.PoliciesDir != "" {
		cfg.PoliciesDir = filepath.Clean(cfg.PoliciesDir)
	}
	switch cfg.Watch {
	case "":
		cfg.Watch = WatchAuto
	case WatchAuto, WatchInotify, WatchPoll:
	default:
		return nil, fmt.Errorf("files source: watch: unknown mode %q (want auto, inotify or poll)", cfg.Watch)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	f := &Files{log: log, reload: make(chan struct{}, 1)}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Load == nil {
		f.loader = newDirLoader()
		f.loader.vars = cfg.DataplaneVars
		f.loader.maxFile, f.loader.maxTotal = limit(cfg.MaxFileBytes, DefaultMaxFileBytes), limit(cfg.MaxTotalBytes, DefaultMaxTotalBytes)
		cfg.Load = f.loader.Load
		if cfg.CacheDir != "" {
			n, err := f.loader.restore(cfg.CacheDir)
			if err != nil {
				f.log.Warn("decode cache: entries unusable, their files are decoded", "error", err)
			}
			if n > 0 {
				f.log.Debug("decode cache restored", "files", n)
			}
		}
	}
	f.cfg = cfg
	return f, nil
}

// Load reads and validates the model now (files do not wait: ctx is not needed).
func (f *Files) Load(ctx context.Context) cplink.Update { return f.load(ctx, "start") }

// load reads the model; cancelling ctx stops the default loader's decoding between pieces
// of a file (SIGTERM during a long load does not wait for it).
func (f *Files) load(ctx context.Context, trigger string) cplink.Update {
	start := time.Now()
	f.log.Debug("loading the model", "trigger", trigger)
	// The fingerprint is taken before reading, so a write racing the read shows up as a
	// difference at the next check rather than being lost.
	f.seen = f.fp.take(f.cfg.DataplaneFile, f.cfg.PoliciesDir)
	if trigger == "reload" && f.loader != nil {
		f.loader.forget() // a forced reload reads every file again
	}
	if f.loader != nil {
		f.loader.setContext(ctx)
	}
	snap, err := f.cfg.Load(f.cfg.DataplaneFile, f.cfg.PoliciesDir)
	u := cplink.Update{Snapshot: snap, Err: err, Trigger: trigger, Took: time.Since(start)}
	if rf := (*RefusedFiles)(nil); snap != nil && errors.As(err, &rf) {
		u.Err, u.Refused = nil, rf.Files
	}
	return u
}

// Reload asks Run for a load now, whether or not anything changed (SIGHUP). Never blocks.
func (f *Files) Reload() {
	select {
	case f.reload <- struct{}{}:
	default:
	}
}

// Run watches the files and sends an cplink.Update for every change until ctx is cancelled.
func (f *Files) Run(ctx context.Context, out chan<- cplink.Update) error {
	f.persist() // what Load decoded at start
	if f.cfg.Watch != WatchPoll {
		w, err := newInotify()
		if err == nil {
			err = f.watchAll(w)
			if err != nil {
				w.Close()
			}
		}
		if err == nil {
			return f.runInotify(ctx, w, out)
		}
		if f.cfg.Watch == WatchInotify {
			return fmt.Errorf("files source: %w", err)
		}
		f.log.Warn("inotify unavailable, polling for changes instead", "error", err, "interval", f.cfg.PollInterval)
	}
	return f.runPoll(ctx, out)
}

// watchAll (re)adds watches on the policy tree and on the dataplane file's directory.
func (f *Files) watchAll(w *inotify) error {
	if err := w.add(filepath.Dir(f.cfg.DataplaneFile)); err != nil {
		return err
	}
	if f.cfg.PoliciesDir == "" {
		return nil
	}
	return w.addTree(f.cfg.PoliciesDir)
}

// relevant reports whether an event can change what a load reads: anything in the policy
// tree, and in the dataplane file's directory only that file (or a ConfigMap's "..data").
func (f *Files) relevant(ev event) bool {
	if ev.mask&unix.IN_Q_OVERFLOW != 0 {
		return true
	}
	if f.cfg.PoliciesDir != "" && (ev.dir == f.cfg.PoliciesDir || strings.HasPrefix(ev.dir, f.cfg.PoliciesDir+string(filepath.Separator))) {
		return true
	}
	return ev.name == filepath.Base(f.cfg.DataplaneFile) || strings.HasPrefix(ev.name, "..")
}

// inotifyReadSize is the buffer a read of inotify events takes: room for 15 events naming
// a file of 255 bytes (the kernel wants one: 16 + 256 bytes), more of shorter names; more
// wait in the kernel for the next read. The reader lives as long as the agent, on a stack
// sized for its largest frame: a buffer of 64 KiB held it at 128 KiB for good.
const inotifyReadSize = 4096

func (f *Files) runInotify(ctx context.Context, w *inotify, out chan<- cplink.Update) error {
	changed := make(chan struct{}, 1)
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, inotifyReadSize)
		for {
			evs, err := w.read(buf)
			if err != nil {
				readDone <- err
				return
			}
			for _, ev := range evs {
				if f.relevant(ev) {
					select {
					case changed <- struct{}{}:
					default:
					}
					break
				}
			}
		}
	}()
	defer func() {
		w.Close() // wakes the reader
		<-readDone
	}()

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	safety := time.NewTicker(10 * f.cfg.PollInterval)
	defer safety.Stop()
	// A change between Load and the watches being set would otherwise be missed.
	pending := f.fp.take(f.cfg.DataplaneFile, f.cfg.PoliciesDir) != f.seen
	if pending {
		debounce.Reset(0)
	}
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			debounce.Stop()
			return nil
		case err := <-readDone:
			readDone <- err // for the deferred wait
			f.log.Warn("inotify stopped, polling for changes instead", "error", err, "interval", f.cfg.PollInterval)
			return f.runPoll(ctx, out)
		case <-changed:
			debounce.Reset(f.cfg.Debounce)
			continue
		case <-debounce.C:
			trigger = "watch"
		case <-safety.C:
			same := f.fp.take(f.cfg.DataplaneFile, f.cfg.PoliciesDir) == f.seen
			safety.Reset(pollEvery(10*f.cfg.PollInterval, f.fp.lastTook()))
			if same {
				continue
			}
			trigger = "poll"
		case <-f.reload:
			trigger = "reload"
		}
		if err := f.watchAll(w); err != nil {
			f.log.Warn("cannot watch a directory; changes there are seen by the periodic check only", "error", err)
		}
		if !f.send(ctx, out, f.load(ctx, trigger)) {
			return nil
		}
		f.persist()
	}
}

// freeAfterResources is how many resources a write of the decode cache holds before the
// memory it used is given back to the OS at once, and before an entry is written at
// cacheWriteGCPercent.
const freeAfterResources = 1000

// cacheWriteGCPercent is the GOGC while a large entry of the decode cache is written (see
// writeEntries): 100,000 dataplanes peaked at 69.0-69.2 MiB (VmHWM) at 50, the write's
// garbage beside the pages the resolver's start had just mapped, right after the first
// model.
const cacheWriteGCPercent = 10

// persist saves the decode cache, off the path of a change to the answers (the update
// was delivered first).
func (f *Files) persist() {
	if f.loader == nil || f.cfg.CacheDir == "" {
		return
	}
	start := time.Now()
	w, err := f.loader.writeCache(f.cfg.CacheDir)
	if err != nil {
		f.log.Warn("cannot save the decode cache", "path", f.cfg.CacheDir, "error", err)
	}
	if w.changed() {
		f.log.Debug("decode cache written", "entries", w.entries, "resources", w.resources, "bytes", w.bytes,
			"removed", w.removed, "took", time.Since(start))
	}
	if w.resources > freeAfterResources {
		// Encoding a large file leaves garbage the size of its part of the model; the agent
		// runs in every pod, so it goes back to the OS now, not at some later GC. A small
		// write (a policy, a few dataplanes) leaves little: no forced GC for it.
		debug.FreeOSMemory()
	}
}

func (f *Files) runPoll(ctx context.Context, out chan<- cplink.Update) error {
	tick := time.NewTicker(f.cfg.PollInterval)
	defer tick.Stop()
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			same := f.fp.take(f.cfg.DataplaneFile, f.cfg.PoliciesDir) == f.seen
			tick.Reset(pollEvery(f.cfg.PollInterval, f.fp.lastTook()))
			if same {
				continue
			}
			trigger = "poll"
		case <-f.reload:
			trigger = "reload"
		}
		if !f.send(ctx, out, f.load(ctx, trigger)) {
			return nil
		}
		f.persist()
	}
}

func (f *Files) send(ctx context.Context, out chan<- cplink.Update, u cplink.Update) bool {
	select {
	case out <- u:
		return true
	case <-ctx.Done():
		return false
	}
}
