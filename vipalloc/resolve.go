package vipalloc

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// resolve settles every touched hostname: collisions, VIPs (new ones in sorted order, so the
// result is deterministic), entries, and the next Table.
func (a *Allocator) resolve(r *round, mesAdded []string) *Table {
	a.allocateMESAdded(r, mesAdded)
	touched := r.touched
	sortHosts(touched)
	a.allocateTouched(touched)
	full := a.table == nil || len(touched) > deltaLimit(a.table.count)/2
	repl, names, addrT := a.settleTouched(touched, full)
	var prevAll []*Entry
	if a.table != nil {
		prevAll = a.table.all
	}
	all := mergeEntries(prevAll, touched, repl)
	if r.skipsChanged {
		a.listSkipped()
	}
	mes := a.mesStatuses()
	if full {
		a.table = buildTable(a.s.v6, all, a.skipped, mes, a.sum)
	} else {
		addrs := make(map[uint32]*Entry, len(addrT))
		for v, key := range addrT {
			addrs[v] = a.addrOwner(v, key)
		}
		a.table = a.table.derive(all, names, addrs, a.skipped, mes, a.sum)
	}
	a.table.ms = a.meshServiceStatuses()
	return a.table
}

// allocateMESAdded gives the MeshExternalServices and MeshServices added (mesAdded: their
// keys) their VIPs first: they come from their own pools, and a new one touches that
// resource's hostnames.
func (a *Allocator) allocateMESAdded(r *round, mesAdded []string) {
	sort.Strings(mesAdded)
	mesAdded = compactStrings(mesAdded)
	var mesNeed []string
	for _, k := range mesAdded {
		src := a.ownerSource(k)
		if _, has := a.mesVIPs[k]; !has && src.has(strings.TrimPrefix(k, src.key)) {
			mesNeed = append(mesNeed, k)
		}
	}
	a.allocateMES(mesNeed)
	for _, k := range mesAdded {
		src := a.ownerSource(k)
		for _, c := range src.byMES[strings.TrimPrefix(k, src.key)] {
			if c.hasHost() {
				r.touchHost(c.host())
			}
		}
	}
}

// allocateTouched sorts each touched hostname's candidates, best first, releases the VIP of
// a hostname left without candidates or now owned by a resource's VIP, and allocates one
// (in hostname order) to each that has none.
func (a *Allocator) allocateTouched(touched []*hostState) {
	need := make([]*hostState, 0, len(touched))
	for _, hs := range touched {
		hs.touched = false
		cands := hs.cands()
		if len(cands) == 0 {
			a.releaseHost(hs)
			continue
		}
		if len(cands) > 1 {
			slices.SortFunc(cands, compareCandidates)
		}
		if cands[0].vipOwner() != "" {
			a.releaseHost(hs)
		} else if !hs.hasVIP {
			need = append(need, hs)
		}
	}
	a.allocateHosts(need)
}

// settleTouched builds the entries of each touched hostname (repl).
// For a table derived from the last one (not full) it also returns the touched hostnames'
// available entries (names) and the touched VIPs with the key of their new owner (addrT,
// "" for none known).
func (a *Allocator) settleTouched(touched []*hostState, full bool) (repl *settled, names map[string]*Entry, addrT map[uint32]string) {
	if full && len(touched) >= parallelWork {
		return a.settleParallel(touched), nil, nil
	}
	repl = newSettled(len(touched), len(touched))
	if !full {
		names = make(map[string]*Entry, len(touched))
		addrT = make(map[uint32]string, len(touched))
	}
	st := settler{slab: a.entrySlab}
	for _, hs := range touched {
		es, oldAvail := a.settle(&st, hs)
		repl.parts[0].add(es)
		if full {
			continue
		}
		name := hs.name() // built once: a default name's is built on each call
		names[name] = hs.avail()
		if e := oldAvail; e != nil && e.flags&hasV4 != 0 {
			if _, seen := addrT[e.v4]; !seen || e.vipOwner() != "" {
				addrT[e.v4] = addrKey(e, name)
			}
		}
		if e := hs.avail(); e != nil && e.flags&hasV4 != 0 {
			addrT[e.v4] = addrKey(e, name)
		}
	}
	a.entrySlab = st.slab
	a.finishSettle(&st)
	return repl, names, addrT
}

// listSkipped lists the skipped candidates again, by key then origin kind.
func (a *Allocator) listSkipped() {
	a.skipped = a.skipped[:0:0]
	for _, c := range a.skips {
		a.skipped = append(a.skipped, Skip{Origin: c.Origin(), Key: c.Key(), Selector: c.Selector(), Tags: c.Tags(),
			MeshExternalService: c.MeshExternalService(), MeshService: c.MeshService(), Reason: c.Reason()})
	}
	sort.Slice(a.skipped, func(i, j int) bool {
		if a.skipped[i].Key != a.skipped[j].Key {
			return a.skipped[i].Key < a.skipped[j].Key
		}
		return a.skipped[i].Origin.Kind < a.skipped[j].Origin.Kind
	})
}

// entriesFor builds the entries of one hostname from its candidates (sorted best first):
// the owner (best candidate) decides the VIP; per port the best candidate with the owner's
// VIP wins; every other candidate gets a NotAvailable entry naming what beat it.
func (a *Allocator) entriesFor(hs *hostState, slab *[]*Entry) ([]*Entry, *Entry) {
	h := hs.host()
	cands := hs.cands()
	owner := cands[0]
	// The candidates share the hostname: their VIPs' keys differ only by owner.
	ownerKey := owner.vipOwner()
	var winners []*candidate
	var out []*Entry
	if len(cands) == 1 {
		winners = cands
	}
	for _, c := range cands[len(winners):] {
		var w *candidate
		if c.vipOwner() != ownerKey {
			w = owner
		} else {
			for _, x := range winners {
				if x.port() == c.port() {
					w = x
					break
				}
			}
		}
		if w == nil {
			winners = append(winners, c)
			continue
		}
		out = append(out, publish(c, 0, false, NotAvailable, lossReason(h, c, w)))
	}
	v, hasVIP := hs.vip, hs.hasVIP
	if ownerKey != "" {
		v, hasVIP = a.mesVIPs[ownerKey]
	}
	status, reason := Available, ""
	if !hasVIP {
		status, reason = NotAvailable, a.poolOf(ownerKey).exhausted()
	}
	var e *Entry
	if len(winners) == 1 {
		e = publish(owner, v, hasVIP, status, reason)
	} else {
		sort.Slice(winners, func(i, j int) bool { return winners[i].port() < winners[j].port() })
		ports, targets := make([]uint32, len(winners)), make([]Target, len(winners))
		for i, w := range winners {
			ports[i] = w.port()
			targets[i] = Target{Port: w.port(), Origin: w.Origin(), Key: w.Key(), Tags: w.Tags(), Selector: w.Selector()}
		}
		// The owner's key, as the owner holds it (same tags and origin: a derived one stays so).
		e = &Entry{hostname: owner.hostname, Status: status, flags: owner.flags & (derivedKey | svcHost)}
		e.setVIP(v, hasVIP)
		d := entryDetail{twin: &a.s.v6, origin: owner.Origin(), key: owner.storedKey(), selector: owner.Selector(),
			meshExternalService: owner.MeshExternalService(), meshService: owner.MeshService(), reason: reason, targets: targets}
		e.refTags(&d, owner.Tags())
		e.setPorts(&d, ports)
		e.setDetail(d)
	}
	var avail *Entry
	if status == Available {
		avail = e
	}
	if out == nil {
		return single(slab, e), avail
	}
	out = append(out, e)
	if len(out) > 1 {
		sort.Slice(out, func(i, j int) bool { return keyLess(out[i], out[j]) })
	}
	return out, avail
}

// publish returns the entry that shows candidate c with VIP v (if hasVIP) and this status:
// the candidate's own proposal the first time (filled in now) or when it already shows
// exactly that, else a copy. A published entry is never changed.
func publish(c *candidate, v uint32, hasVIP bool, status Status, reason string) *Entry {
	if !c.isPublished() {
		c.flags |= published
		c.setVIP(v, hasVIP)
		c.Status = status
		c.setReason(reason)
		return &c.Entry
	}
	if c.sameVIP(v, hasVIP) && c.Status == status && c.Reason() == reason {
		return &c.Entry
	}
	e := c.Entry
	e.flags &^= published // a copy: the candidate's own entry is the one published as is
	e.setVIP(v, hasVIP)
	e.Status = status
	e.setReason(reason)
	return &e
}

// single returns a one-element slice holding e, from a slab.
func single(slab *[]*Entry, e *Entry) []*Entry {
	if len(*slab) == cap(*slab) {
		*slab = make([]*Entry, 0, 1024)
	}
	l := len(*slab)
	*slab = append(*slab, e)
	return (*slab)[l : l+1 : l+1]
}

// lossReason says why c lost hostname h to w.
func lossReason(h hostName, c, w *candidate) string {
	var why string
	switch {
	case w.source().explicit != c.source().explicit:
		why = "a policy beats a default name"
	case !w.source().created.Equal(c.source().created):
		why = "it is older"
	default:
		why = "same age: the lower kind/name/key wins"
	}
	// One buffer, one string: every losing candidate has its reason.
	var buf [256]byte
	b := buf[:0]
	sameVIP := c.vipOwner() == w.vipOwner() // of one hostname
	if sameVIP {
		b = strconv.AppendUint(append(h.appendTo(b), ':'), uint64(c.port()), 10)
	} else {
		b = strconv.AppendQuote(append(b, "hostname "...), h.String())
	}
	wo := w.Origin()
	b = append(append(append(b, " is taken by "...), wo.Kind...), ' ')
	b = append(w.appendKey(append(strconv.AppendQuote(b, wo.Name), " ("...)), "), which wins ("...)
	b = append(append(b, why...), ')')
	if !sameVIP {
		what := "a mesh hostname and a MeshExternalService hostname cannot share a VIP"
		switch {
		case c.MeshExternalService() != "" && w.MeshExternalService() != "":
			what = "each MeshExternalService has its own VIP"
		case c.MeshService() != "" && w.MeshService() != "":
			what = "each MeshService has its own VIP"
		case c.MeshService() != "" || w.MeshService() != "":
			what = "a MeshService's hostnames share its VIP, no other hostname's"
		}
		b = append(append(b, "; "...), what...)
	}
	return string(b)
}

// addrKey is the key whose VIP an available entry of hostname host shows.
func addrKey(e *Entry, host string) string {
	if o := e.vipOwner(); o != "" {
		return o
	}
	return host
}

// addrOwner is the available entry that answers PTR for VIP v, held by key: the hostname
// holding it, or for a MeshExternalService VIP the first of its available hostnames.
func (a *Allocator) addrOwner(v uint32, key string) *Entry {
	if key == "" {
		return nil
	}
	if src := a.ownerSource(key); src != nil {
		var best *Entry
		for _, c := range src.byMES[strings.TrimPrefix(key, src.key)] {
			hs := a.host(c.host())
			if !c.hasHost() || hs == nil {
				continue
			}
			if e := hs.avail(); e != nil && e.vipOwner() == key && (best == nil || e.host().compare(best.host()) < 0) {
				best = e
			}
		}
		return best
	}
	if hs := a.host(hostName{head: key}); hs != nil {
		if e := hs.avail(); e != nil && e.flags&hasV4 != 0 && e.v4 == v {
			return e
		}
	}
	return nil
}

// mesStatuses builds the MeshExternalService design's status block of every MeshExternalService.
func (a *Allocator) mesStatuses() map[string]MESStatus {
	if len(a.mes.names) == 0 {
		return nil
	}
	out := make(map[string]MESStatus, len(a.mes.names))
	for _, n := range a.mes.names {
		st := MESStatus{VIP: MESVIP{Type: "Kuma"}, Addresses: []MESAddress{}}
		if v, ok := a.mesVIPs[mesKeyPrefix+n]; ok {
			st.VIP.Value = u4(v).String()
		}
		for _, c := range a.mes.byMES[n] {
			ad := MESAddress{Hostname: c.Hostname(), Status: NotAvailable, Origin: c.Origin(), Reason: c.Reason()}
			if c.hasHost() {
				ad.Status, ad.Reason = a.candidateStatus(c)
			}
			st.Addresses = append(st.Addresses, ad)
		}
		out[n] = st
	}
	return out
}

// candidateStatus finds the entry a candidate ended up in.
func (a *Allocator) candidateStatus(c *candidate) (Status, string) {
	hs := a.host(c.host())
	if hs == nil {
		return NotAvailable, "no entry"
	}
	key := c.Key()
	for i := range hs.numEntries() {
		e := hs.entry(i)
		if keyIs(e, key) {
			return e.Status, e.Reason()
		}
		for _, tg := range e.Targets() {
			if tg.Key == key {
				return e.Status, e.Reason()
			}
		}
	}
	return NotAvailable, "no entry"
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
