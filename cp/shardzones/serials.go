package shardzones

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
)

// DefaultHold is how long a replica that is not the leader keeps serving a zone as it was
// when its own build of the zone has content the leader has not recorded: the leader
// records it within milliseconds when it sees the same; past this (no leader, or a replica
// that sees another readiness), the replica serves its own content.
const DefaultHold = 10 * time.Second

// Serials keeps each zone's serial in etcd, so that a zone's serial is a property of its
// content: the same on every replica, after any restart and in `kuma-cp zones`; strictly
// larger after any change of the content (authdns.NextSerial), unchanged when unchanged.
//
// The record of a zone is the key <prefix>-zones/<origin>, holding the hash of its content
// and its serial ({"hash":"<16 hex digits>","serial":N}). The leader writes it, compared and
// set on the record it read, when the content it built differs, and deletes the records of
// zones it no longer builds; every replica follows the records. A replica serves:
//   - the zone with the record's serial when its content is the recorded one;
//   - as the leader, new content with NextSerial(the record's serial, its revision), recorded
//     at once;
//   - otherwise the zone as it served it before (held) for up to Hold, or, a zone it never
//     served or held past Hold, its own content with NextSerial - the serial the leader
//     gives the same content.
//
// A replica never serves a zone's serial behind one it served: when it must take a serial
// past the record's for the recorded content, it records that serial (compared and set, for
// that content only), so every replica then serves it. A zone without a record (new, or
// deleted and back) starts past the largest serial of the zones deleted (floorKey).
type Serials struct {
	cl      *clientv3.Client
	prefix  string
	leading func() bool
	// Hold: see DefaultHold (0 is DefaultHold).
	Hold time.Duration
	log  *slog.Logger

	mu      sync.Mutex
	recs    map[string]serialRecord // origin -> as read from etcd
	served  map[string]servedZone   // origin -> what this replica serves
	holding map[string]time.Time    // origin -> since when its new content is held
	held    map[string]bool         // of the build being made: the zones to keep as served
	changed chan struct{}           // a record differs from what is served, or a hold ends
	writes  chan map[string]serialRecord
}

type serialRecord struct {
	hash    uint64
	serial  uint32
	version int64 // the key's mod revision, for compare-and-set (0: none)
}

type servedZone struct {
	hash   uint64
	serial uint32
}

// recordJSON is a record as stored.
type recordJSON struct {
	Hash   string `json:"hash"`
	Serial uint32 `json:"serial"`
}

// NewSerials follows the zones' records under prefix ("/kuma": keys /kuma-zones/...) on cl;
// leading says whether this replica is the leader (nil: never). Run it.
func NewSerials(cl *clientv3.Client, prefix string, leading func() bool, log *slog.Logger) *Serials {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if leading == nil {
		leading = func() bool { return false }
	}
	return &Serials{cl: cl, prefix: SerialsPrefix(prefix), leading: leading, log: log,
		recs: map[string]serialRecord{}, served: map[string]servedZone{}, holding: map[string]time.Time{},
		changed: make(chan struct{}, 1), writes: make(chan map[string]serialRecord, 1)}
}

// floorKey names the record of the largest serial of a zone whose record was deleted (its
// zone gone): a zone without a record starts past it, so a zone deleted and created again
// never gets a serial behind one a secondary still holds. No origin is named so (an origin
// ends with a dot).
const floorKey = "deleted-zones-floor"

// SerialsPrefix is where the zones' records live for the store prefix (outside it: lists and
// watches of resources never see them).
func SerialsPrefix(storePrefix string) string {
	return strings.TrimSuffix(storePrefix, "/") + "-zones/"
}

// Changed is signalled when the zones should be built again: a record differs from what this
// replica serves, or a hold has lasted Hold.
func (s *Serials) Changed() <-chan struct{} { return s.changed }

func (s *Serials) kick() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *Serials) hold() time.Duration {
	if s.Hold > 0 {
		return s.Hold
	}
	return DefaultHold
}

// Load reads every record once (Run does, and follows them).
func (s *Serials) Load(ctx context.Context) (rev int64, err error) {
	recs, rev, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	s.merge(recs, rev)
	s.kick()
	return rev, nil
}

// read reads every record, and the revision read at.
func (s *Serials) read(ctx context.Context) (map[string]serialRecord, int64, error) {
	r, err := s.cl.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("zone serials: %w", err)
	}
	recs := map[string]serialRecord{}
	for _, kv := range r.Kvs {
		origin, rec, err := s.decode(kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			s.log.Warn("a zone's serial record does not decode; the leader rewrites it", "key", string(kv.Key), "error", err)
			continue
		}
		recs[origin] = rec
	}
	return recs, r.Header.Revision, nil
}

// merge takes the records read at revision rev as what etcd holds, except where this replica
// knows newer: a record it noted at a later revision - from the watch, or its own write -
// while the read was under way (Run's and the first build's reads overlap the watch). A read
// that replaced the records lost such a record for good: the watch does not deliver it again,
// and the replica served a serial that no record held (it then never wrote the serial it
// took past the record's, and the leader never learnt of it).
func (s *Serials) merge(recs map[string]serialRecord, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for o, cur := range s.recs {
		if _, ok := recs[o]; !ok && cur.version <= rev {
			delete(s.recs, o) // gone by rev
		}
	}
	for o, rec := range recs {
		if cur, ok := s.recs[o]; !ok || rec.version >= cur.version {
			s.recs[o] = rec
		}
	}
}

func (s *Serials) decode(key, val []byte, version int64) (string, serialRecord, error) {
	var j recordJSON
	if err := json.Unmarshal(val, &j); err != nil {
		return "", serialRecord{}, err
	}
	h, err := strconv.ParseUint(j.Hash, 16, 64)
	if err != nil {
		return "", serialRecord{}, fmt.Errorf("hash %q: %w", j.Hash, err)
	}
	return strings.TrimPrefix(string(key), s.prefix), serialRecord{hash: h, serial: j.Serial, version: version}, nil
}

// Run follows the records (and, on the leader, writes them) until ctx ends.
func (s *Serials) Run(ctx context.Context) {
	go s.writer(ctx)
	for ctx.Err() == nil {
		rev, err := s.Load(ctx)
		if err == nil {
			err = s.follow(ctx, rev)
		}
		if ctx.Err() == nil {
			s.log.Debug("zone serials: watch ended; reading the records again", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

func (s *Serials) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cl.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		differs := false
		for _, e := range wr.Events {
			origin := strings.TrimPrefix(string(e.Kv.Key), s.prefix)
			if e.Type == clientv3.EventTypeDelete {
				delete(s.recs, origin)
				continue
			}
			_, rec, err := s.decode(e.Kv.Key, e.Kv.Value, e.Kv.ModRevision)
			if err != nil || rec.version < s.recs[origin].version {
				continue // an older write than the one this replica made and noted
			}
			s.recs[origin] = rec
			if sv, ok := s.served[origin]; ok && (sv.hash != rec.hash || sv.serial != rec.serial) {
				differs = true
			}
		}
		s.mu.Unlock()
		if differs {
			s.kick()
		}
	}
	return ctx.Err()
}

// Serial implements authdns.SerialSource for one build (see Serials).
func (s *Serials) Serial(origin string, hash uint64, rev int64) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, recorded := s.recs[origin]
	if !recorded {
		rec.serial = s.recs[floorKey].serial // a zone new, or deleted and back: past every deleted one
	}
	sv, served := s.served[origin]
	var serial uint32
	switch {
	case recorded && rec.hash == hash:
		serial = rec.serial
	case served && sv.hash == hash && (!s.leading() || authdns.SerialAfter(sv.serial, rec.serial)):
		// unchanged content keeps its serial (on the leader, unless another content was
		// recorded since with a serial as large: its own record is then behind)
		return sv.serial
	case s.leading() || !served:
		serial = authdns.NextSerial(rec.serial, rev)
	default:
		since, ok := s.holding[origin]
		if !ok {
			since = time.Now()
			s.holding[origin] = since
			time.AfterFunc(s.hold(), s.kick)
		}
		if time.Since(since) < s.hold() {
			s.held[origin] = true
			return sv.serial
		}
		s.log.Warn("zone content differs from the leader's record for too long; serving this replica's", "zone", origin, "held", s.hold().String())
		serial = authdns.NextSerial(rec.serial, rev)
	}
	delete(s.holding, origin)
	if served && sv.hash != hash && !authdns.SerialAfter(serial, sv.serial) {
		serial = authdns.NextSerial(sv.serial, 0) // never behind what was served
	} else if served && sv.hash == hash && authdns.SerialAfter(sv.serial, serial) {
		serial = sv.serial
	}
	return serial
}

// Build builds the zones of in with these serials and returns the catalog to serve: prev's
// zone in place of each zone held.
func (s *Serials) Build(in authdns.Input, prev *authdns.Catalog) (*authdns.Catalog, []authdns.Problem) {
	s.mu.Lock()
	s.held = map[string]bool{}
	s.mu.Unlock()
	cat, problems := authdns.Build(in, s)
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	if len(held) > 0 && prev != nil {
		zones := cat.Zones()
		for i, z := range zones {
			if held[z.Origin] {
				if old := prev.Zone(z.Origin); old != nil {
					zones[i] = old
				}
			}
		}
		cat = authdns.NewCatalog(zones...)
	}
	s.note(cat)
	return cat, problems
}

// note notes what cat serves and has the records written that differ: on the leader, every
// zone's (and the records of zones gone deleted); on another replica, only a serial of the
// recorded content that this replica had to take past the record's (never behind what it
// served), so that every replica then serves that one.
func (s *Serials) note(cat *authdns.Catalog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.served)
	for _, z := range cat.Zones() {
		s.served[z.Origin] = servedZone{hash: z.Hash(), serial: z.Serial()}
	}
	leader := s.leading()
	want := map[string]serialRecord{}
	for o, sv := range s.served {
		rec, ok := s.recs[o]
		switch {
		case leader && (rec.hash != sv.hash || rec.serial != sv.serial),
			ok && rec.hash == sv.hash && authdns.SerialAfter(sv.serial, rec.serial):
			want[o] = serialRecord{hash: sv.hash, serial: sv.serial, version: rec.version}
		}
	}
	if leader {
		floor := s.recs[floorKey]
		for o, rec := range s.recs {
			if _, ok := s.served[o]; !ok && o != floorKey {
				want[o] = serialRecord{version: rec.version} // serial 0: delete
				if floor.serial == 0 || authdns.SerialAfter(rec.serial, floor.serial) {
					floor.serial = rec.serial
				}
			}
		}
		if floor != s.recs[floorKey] {
			want[floorKey] = floor
		}
	}
	if len(want) == 0 {
		return
	}
	select { // the newest wins: a pending older set is replaced
	case <-s.writes:
	default:
	}
	s.writes <- want
}

// writer writes the records asked, each compared and set on the version read: a record
// that changed since (another writer) is not overwritten; the zones are built again from
// the newer one.
func (s *Serials) writer(ctx context.Context) {
	for {
		var want map[string]serialRecord
		select {
		case <-ctx.Done():
			return
		case want = <-s.writes:
		}
		lost := false
		if floor, ok := want[floorKey]; ok { // before the records it stands for are deleted
			delete(want, floorKey)
			if err := s.write(ctx, floorKey, floor); err != nil {
				s.log.Warn("zone serials: the floor of deleted zones is not written; the zones are built again", "error", err)
				want, lost = nil, true
			}
		}
		for origin, rec := range want {
			if err := s.write(ctx, origin, rec); err != nil {
				s.log.Warn("zone serials: the record is not written; the zones are built again", "zone", origin, "error", err)
				lost = true
			}
		}
		if lost && ctx.Err() == nil {
			time.AfterFunc(100*time.Millisecond, s.kick) // built again from the newer records
		}
	}
}

// Served builds, from what etcd holds under prefix, the zones the replicas serve: the
// routers' replicas ready as their status says (all of them when none is), and each zone's
// recorded serial - or, for content the leader has not
// recorded yet, the one it gives it. cfg gives the settings of the replicas' zones (user
// zones, nameservers, hostmaster).
func Served(ctx context.Context, cl *clientv3.Client, prefix string, cfg authdns.Input) (*authdns.Catalog, []authdns.Problem, error) {
	st := store.NewEtcd(cl, prefix)
	items, _, _, err := st.List(ctx, "", "", "", 0)
	if err != nil {
		return nil, nil, err
	}
	serials := NewSerials(cl, prefix, nil, nil)
	if _, err := serials.Load(ctx); err != nil {
		return nil, nil, err
	}
	in := Input(items, nil) // readiness as the routers' status says: what the replicas serve
	in.Nameservers, in.Hostmaster, in.UserZones, in.DefaultNSAddr = cfg.Nameservers, cfg.Hostmaster, cfg.UserZones, cfg.DefaultNSAddr
	cat, problems := authdns.Build(in, serials)
	return cat, problems, nil
}

// write sets the record of origin (serial 0: deletes it), compared on the version it was
// read at. When the record changed since: done when it holds rec already, written over when
// the record there now is behind rec (a write of this replica's that it had not noted yet),
// else errRecordAhead.
func (s *Serials) write(ctx context.Context, origin string, rec serialRecord) error {
	key := s.prefix + origin
	op := clientv3.OpDelete(key)
	if rec.serial != 0 {
		val, _ := json.Marshal(recordJSON{Hash: fmt.Sprintf("%016x", rec.hash), Serial: rec.serial})
		op = clientv3.OpPut(key, string(val))
	}
	for range 3 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tr, err := s.cl.Txn(wctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rec.version)).Then(op).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return err
		}
		if tr.Succeeded {
			s.mu.Lock()
			if rec.serial == 0 {
				delete(s.recs, origin)
			} else {
				rec.version = tr.Header.Revision
				s.recs[origin] = rec
			}
			s.mu.Unlock()
			return nil
		}
		rec.version = 0 // gone since: created again
		if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			_, now, err := s.decode(kvs[0].Key, kvs[0].Value, kvs[0].ModRevision)
			if err == nil && now.hash == rec.hash && now.serial == rec.serial {
				// Already holds it: a write of the same asked twice (two builds of one
				// content, the second asked before the first was written).
				s.mu.Lock()
				if cur := s.recs[origin]; now.version > cur.version {
					s.recs[origin] = now
				}
				s.mu.Unlock()
				return nil
			}
			if err == nil && (rec.serial == 0 || !authdns.SerialAfter(rec.serial, now.serial)) {
				return errRecordAhead
			}
			rec.version = kvs[0].ModRevision
		}
	}
	return errRecordAhead
}

var errRecordAhead = errors.New("the record was changed by another writer")
