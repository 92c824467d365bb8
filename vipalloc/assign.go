package vipalloc

import (
	"net/netip"
	"strings"
)

// VIP bookkeeping: who holds which address, releases, and allocation in sorted order with
// sticky preferences first.

// ownerSource is the source of the resource whose VIP key is key ("mes/<name>",
// "ms/<name>"), nil for a hostname.
func (a *Allocator) ownerSource(key string) *mesSource {
	switch {
	case strings.HasPrefix(key, mesKeyPrefix):
		return a.mes
	case strings.HasPrefix(key, msKeyPrefix):
		return a.ms
	}
	return nil
}

// vipOf is the VIP held by key (a hostname, "mes/<name>" or "ms/<name>").
func (a *Allocator) vipOf(key string) (uint32, bool) {
	if a.ownerSource(key) != nil {
		v, ok := a.mesVIPs[key]
		return v, ok
	}
	if hs := a.host(hostName{head: key}); hs != nil && hs.hasVIP {
		return hs.vip, true
	}
	return 0, false
}

// eachAssignment calls add with every key holding a VIP (what the state file keeps); a
// default name's is not built.
func (a *Allocator) eachAssignment(add func(key hostName, v uint32)) {
	for k, v := range a.mesVIPs {
		add(hostName{head: k}, v)
	}
	for i := range a.hosts {
		a.hosts[i].each(func(hs *hostState) {
			if hs.hasVIP {
				add(hs.host(), hs.vip)
			}
		})
	}
}

// releaseMES frees the VIP of a MeshExternalService or MeshService key.
func (a *Allocator) releaseMES(key string) {
	delete(a.pending, key)
	if v, ok := a.mesVIPs[key]; ok {
		delete(a.mesVIPs, key)
		a.poolOf(key).release(v)
		a.dirty = true
	}
}

// releaseHost frees the VIP of a hostname.
func (a *Allocator) releaseHost(hs *hostState) {
	if len(a.pending) > 0 {
		delete(a.pending, hs.name())
	}
	if hs.hasVIP {
		hs.hasVIP = false
		a.s.service.release(hs.vip)
		a.dirty = true
	}
}

func (a *Allocator) poolOf(key string) *pool {
	switch a.ownerSource(key) {
	case a.mes:
		return a.s.external
	case a.ms:
		return a.s.meshService
	}
	return a.s.service
}

// take gives key a VIP from p: its sticky one if free, else by hash and probe. A full pool
// leaves key pending (a copy of it: key may be a hostname spelled in a reused buffer).
func take[K string | []byte](a *Allocator, p *pool, key K) (uint32, bool) {
	want, has := a.sticky[string(key)]
	v, ok := p.take(hashKey(key), want, has)
	if !ok {
		a.pending[string(key)] = struct{}{}
		return 0, false
	}
	if len(a.pending) > 0 {
		delete(a.pending, string(key))
	}
	if has {
		delete(a.sticky, string(key))
	}
	a.dirty = true
	return v, true
}

// allocateHosts gives hostnames (sorted) their VIPs in two passes: names with a sticky
// preference first, so that a remembered VIP is not taken by a newcomer, then the others.
func (a *Allocator) allocateHosts(hss []*hostState) {
	if p := a.s.service; p.used.len() == 0 && len(hss) > 1024 {
		p.used.reserve(len(hss))
	}
	for pass := 0; pass < 2; pass++ {
		for _, hs := range hss {
			if hs.hasVIP {
				continue
			}
			a.nameBuf = hs.host().appendTo(a.nameBuf[:0]) // a default name is not built
			if _, sticky := a.sticky[string(a.nameBuf)]; (pass == 0) != sticky {
				continue
			}
			hs.vip, hs.hasVIP = take(a, a.s.service, a.nameBuf)
		}
	}
}

// allocateMES does the same for MeshExternalService and MeshService keys (sorted).
func (a *Allocator) allocateMES(keys []string) {
	for pass := 0; pass < 2; pass++ {
		for _, k := range keys {
			if _, done := a.mesVIPs[k]; done {
				continue
			}
			if _, sticky := a.sticky[k]; (pass == 0) != sticky {
				continue
			}
			if v, ok := take(a, a.poolOf(k), k); ok {
				a.mesVIPs[k] = v
			}
		}
	}
}

// VIP returns the IPv4 VIP held by a hostname or, with the "mes/" ("ms/") prefix, a
// MeshExternalService (MeshService), and its IPv6 twin.
func (a *Allocator) VIP(key string) (v4, v6 netip.Addr, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.vipOf(key)
	if !ok {
		return netip.Addr{}, netip.Addr{}, false
	}
	return u4(v), twin(a.s.v6, v), true
}
