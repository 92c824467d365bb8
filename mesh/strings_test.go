package mesh

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

const keptDataplane = `type: Dataplane
mesh: default
name: web-1
modificationTime: "2024-01-02T15:04:05Z"
metrics:
  type: prometheus
probes:
  port: 9000
networking:
  address: 10.0.0.1
  admin:
    port: 9901
  inbound:
    - port: 80
      name: http
      serviceProbe:
        timeout: 1s
      tags:
        kuma.io/service: web
`

// The fields the agent keeps without acting on them live apart from the Dataplane (nil for
// the common dataplane without them) and read back as written, in JSON and through gob.
func TestDataplaneKeptFields(t *testing.T) {
	rs, err := Decode("kept.yaml", []byte(keptDataplane))
	if err != nil {
		t.Fatal(err)
	}
	dp := rs[0].(*Dataplane)
	if dp.Kept() == nil || dp.Networking.NetworkingExtra == nil || dp.Networking.Inbound[0].InboundExtra == nil {
		t.Fatalf("kept fields dropped: %+v", dp)
	}
	if string(dp.Metrics) != `{"type":"prometheus"}` || string(dp.Probes) != `{"port":9000}` ||
		dp.ModificationTime != "2024-01-02T15:04:05Z" || string(dp.Networking.Admin) != `{"port":9901}` ||
		dp.Networking.Inbound[0].Name != "http" || string(dp.Networking.Inbound[0].ServiceProbe) != `{"timeout":"1s"}` {
		t.Fatalf("kept fields differ: metrics %s probes %s time %q admin %s", dp.Metrics, dp.Probes,
			dp.ModificationTime, dp.Networking.Admin)
	}
	j, err := json.Marshal(dp)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"metrics":{"type":"prometheus"}`, `"probes":{"port":9000}`,
		`"modificationTime":"2024-01-02T15:04:05Z"`, `"admin":{"port":9901}`, `"name":"http"`,
		`"serviceProbe":{"timeout":"1s"}`} {
		if !bytes.Contains(j, []byte(want)) {
			t.Errorf("JSON lacks %s: %s", want, j)
		}
	}
	back := gobRoundTrip(t, dp)
	if string(back.Metrics) != string(dp.Metrics) || back.Networking.Inbound[0].Name != "http" {
		t.Fatalf("gob round trip: %+v", back)
	}

	// A gateway dataplane (no inbounds, as in Kuma) keeps its gateway as written.
	gws, err := Decode("gw.yaml", []byte("type: Dataplane\nmesh: default\nname: gw-1\nnetworking:\n  address: 10.0.0.3\n"+
		"  gateway:\n    type: BUILTIN\n    tags:\n      kuma.io/service: edge\n"))
	if err != nil {
		t.Fatal(err)
	}
	gw := gws[0].(*Dataplane)
	gj, err := json.Marshal(gw)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gw.Networking.Gateway), `"BUILTIN"`) || !bytes.Contains(gj, []byte(`"gateway":{`)) ||
		string(gobRoundTrip(t, gw).Networking.Gateway) != string(gw.Networking.Gateway) || !slices.Contains(gw.KeptFields(), "networking.gateway") {
		t.Fatalf("gateway %s, JSON %s, kept %v", gw.Networking.Gateway, gj, gw.KeptFields())
	}

	plain, err := Decode("plain.yaml", []byte("type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: web\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := plain[0].(*Dataplane); p.MetaExtra != nil || p.Networking.NetworkingExtra != nil || p.Networking.Inbound[0].InboundExtra != nil {
		t.Fatalf("a dataplane without kept fields holds them: %+v %+v", p.MetaExtra, p.Networking.NetworkingExtra)
	}
	if got := plain[0].(*Dataplane).KeptFields(); got != nil {
		t.Fatalf("KeptFields of a plain dataplane: %v", got)
	}
	if got := dp.KeptFields(); len(got) != 4 {
		t.Fatalf("KeptFields: %v, want metrics, probes, admin and serviceProbe", got)
	}
}

// Decoded strings do not point into the file's text (which would keep it all alive), and
// the strings that repeat (tag keys, mesh names) are one copy.
func TestDecodedStringsLeaveTheText(t *testing.T) {
	var sb strings.Builder
	for _, name := range []string{"a-1", "b-1", "c-1"} {
		sb.WriteString(strings.ReplaceAll("type: Dataplane\nmesh: default\nname: NAME\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: NAME\n        version: v1\n---\n", "NAME", name))
	}
	rs, err := Decode("three.yaml", []byte(sb.String()))
	if err != nil || len(rs) != 3 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	// A name sliced out of the text is followed by the rest of its line ("\n" and the
	// next key); a copy is followed by the next string copied (the address).
	inText := func(s string) bool {
		return unsafe.Slice(unsafe.StringData(s), len(s)+1)[len(s)] == '\n'
	}
	var keys []string
	for _, r := range rs {
		dp := r.(*Dataplane)
		if inText(dp.Name) {
			t.Errorf("the name %q points into the file's text", dp.Name)
		}
		for _, tg := range dp.Networking.Inbound[0].Tags {
			if tg.Key == ServiceTag {
				keys = append(keys, tg.Key)
			}
		}
	}
	if len(keys) != 3 || unsafe.StringData(keys[0]) != unsafe.StringData(keys[1]) || unsafe.StringData(keys[1]) != unsafe.StringData(keys[2]) {
		t.Errorf("the tag key %s is not shared between the dataplanes", ServiceTag)
	}
	if m0, m1 := rs[0].GetMeta().Mesh, rs[1].GetMeta().Mesh; unsafe.StringData(m0) != unsafe.StringData(m1) {
		t.Error("the mesh name is not shared")
	}
}

// Replicas (inbounds with the same tags) share one tag map; other tags get their own.
func TestReplicasShareTags(t *testing.T) {
	doc := "type: Dataplane\nmesh: default\nname: NAME\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: SVC\n        version: v1\n---\n"
	var sb strings.Builder
	for _, d := range [][2]string{{"web-1", "web"}, {"web-2", "web"}, {"api-1", "api"}} {
		sb.WriteString(strings.NewReplacer("NAME", d[0], "SVC", d[1]).Replace(doc))
	}
	rs, err := Decode("replicas.yaml", []byte(sb.String()))
	if err != nil || len(rs) != 3 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	tags := func(i int) Tags { return rs[i].(*Dataplane).Networking.Inbound[0].Tags }
	ptr := func(m Tags) uintptr { return reflect.ValueOf(m).Pointer() }
	if ptr(tags(0)) != ptr(tags(1)) {
		t.Error("web-1 and web-2 have the same tags but two maps")
	}
	if ptr(tags(0)) == ptr(tags(2)) || tags(2).Value(ServiceTag) != "api" || tags(0).Value(ServiceTag) != "web" || len(tags(0)) != 2 {
		t.Errorf("api-1's tags: %v; web's: %v", tags(2), tags(0))
	}
}

// gobRoundTrip is dp encoded with gob (as the decode cache does) and decoded again.
func gobRoundTrip(t *testing.T, dp *Dataplane) Dataplane {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(dp); err != nil {
		t.Fatal(err)
	}
	var back Dataplane
	if err := gob.NewDecoder(&buf).Decode(&back); err != nil {
		t.Fatal(err)
	}
	return back
}

// A file of one resource holds a few hundred bytes of copied strings, not a whole 32 KiB
// block: a directory of a file per dataplane (2,000 of them) held 64 MB of blocks.
func TestSmallFileKeepsSmallStringBlocks(t *testing.T) {
	doc := []byte("type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: web\n")
	const files = 200
	kept := make([][]Resource, 0, files)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range files {
		rs, err := Decode("dp.yaml", doc)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, rs)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perFile := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / files
	if perFile > 4<<10 {
		t.Errorf("a decoded one-dataplane file holds %d bytes, want under 4 KiB", perFile)
	}
	if dp := kept[files-1][0].(*Dataplane); dp.Name != "web-1" || dp.Networking.Inbound[0].Tags.Value("kuma.io/service") != "web" {
		t.Fatalf("decoded %+v", dp)
	}
	runtime.KeepAlive(kept)
}

// A file's string blocks grow from small to arenaBlock, and a long string gets a block of its
// own size.
func TestStringBlocksGrow(t *testing.T) {
	a := newStrArena(0)
	a.put("x")
	if c := cap(a.block); c != arenaFirstBlock {
		t.Fatalf("first block %d bytes, want %d", c, arenaFirstBlock)
	}
	caps := []int{cap(a.block)}
	for i := range 2000 {
		a.put(fmt.Sprintf("%0100d", i)) // none begins another
		if c := cap(a.block); c != caps[len(caps)-1] {
			caps = append(caps, c)
		}
	}
	want := []int{512, 1024, 2048, 4096, 8192, 16384, 32768}
	if !slices.Equal(caps, want) {
		t.Fatalf("block sizes %v, want %v", caps, want)
	}
	long := strings.Repeat("z", arenaBlock/4)
	if got := a.put(long); got != long || cap(a.block) != arenaBlock {
		t.Fatalf("a %d-byte string: %d, block %d", len(long), len(got), cap(a.block))
	}
}

// A small file's strings start in a block of a third of its size (at least 64 bytes): a
// directory of one dataplane per file holds a few dozen bytes of blocks a file, not the
// file's size; a file whose strings fill more gets a second block of two thirds.
func TestStringBlocksOfASmallFile(t *testing.T) {
	data := []byte("type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.9.9.9\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: web\n")
	a := newStrArena(len(data))
	a.put("x")
	if c := cap(a.block); c != 64 {
		t.Fatalf("first block of a %d-byte text: %d bytes, want 64", len(data), c)
	}
	b := newStrArena(900)
	b.put(strings.Repeat("y", 250))
	b.put(strings.Repeat("z", 100))
	if c := cap(b.block); c != 600 {
		t.Fatalf("second block of a 900-byte text: %d bytes, want 600", c)
	}
}

// A dataplane of one inbound is one object with that inbound (176 bytes where the two apart
// took 192); its tag set is an object of its own, shared by a replica; a dataplane of two
// inbounds keeps them in a slice of their own.
func TestOneInboundDataplaneIsOneObject(t *testing.T) {
	doc := "type: Dataplane\nmesh: default\nname: NAME\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: SVC\n---\n"
	var sb strings.Builder
	for _, d := range [][2]string{{"web-1", "web"}, {"web-2", "web"}} {
		sb.WriteString(strings.NewReplacer("NAME", d[0], "SVC", d[1]).Replace(doc))
	}
	sb.WriteString("type: Dataplane\nmesh: default\nname: two\nnetworking:\n  address: 10.0.0.3\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: a\n    - port: 81\n      tags:\n        kuma.io/service: b\n")
	rs, err := Decode("cells.yaml", []byte(sb.String()))
	if err != nil || len(rs) != 3 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	within := func(dp *Dataplane, p unsafe.Pointer) bool {
		start := uintptr(unsafe.Pointer(dp))
		return uintptr(p) >= start && uintptr(p) < start+unsafe.Sizeof(dataplaneCell{})
	}
	web1, web2, two := rs[0].(*Dataplane), rs[1].(*Dataplane), rs[2].(*Dataplane)
	in := web1.Networking.Inbound
	if len(in) != 1 || cap(in) != 1 || !within(web1, unsafe.Pointer(&in[0])) {
		t.Errorf("web-1's inbound %p is not in its object %p", &in[0], web1)
	}
	if in[0].Port != 80 || in[0].Tags.Value(ServiceTag) != "web" || web1.Name != "web-1" || web1.Networking.Address != "10.0.0.2" {
		t.Errorf("web-1 settled as %+v", *web1)
	}
	if t2 := web2.Networking.Inbound[0].Tags; &t2[0] != &in[0].Tags[0] || !within(web2, unsafe.Pointer(&web2.Networking.Inbound[0])) {
		t.Errorf("web-2 (a replica) holds tags %p, want web-1's %p, and its inbound in its object", &t2[0], &in[0].Tags[0])
	}
	if in := two.Networking.Inbound; len(in) != 2 || within(two, unsafe.Pointer(&in[0])) || in[1].Tags.Value(ServiceTag) != "b" {
		t.Errorf("a dataplane of two inbounds settled as %+v", in)
	}
}

// Settling n replicas of a one-inbound dataplane allocates one object of 176 bytes each
// (and one tag set for all): an inbound's own address is in its InboundExtra, which few
// inbounds have (the object was 192 with it in the inbound).
func TestSettledReplicaIsOneObject(t *testing.T) {
	const n = 1000
	dp := &Dataplane{Meta: Meta{Mesh: "default", Name: "web"}, Networking: Networking{Address: "10.0.0.1",
		Inbound: []Inbound{{Port: 80, Tags: Tags{{Key: ServiceTag, Value: "web"}}}}}}
	rs := make([]Resource, n)
	for i := range rs {
		rs[i] = dp
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	settle(rs, false)
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 180 || after.Mallocs-before.Mallocs > n+20 {
		t.Errorf("a settled replica takes %d bytes, %d objects for %d; want one object of 176", per, after.Mallocs-before.Mallocs, n)
	}
}

// A string that begins the last or the one before (a service's name after its dataplane's,
// "redis" after "redis-1") is a part of its bytes; one that the last string begins, when
// that string ends the block, extends it in place.
func TestStringBlocksShareBeginnings(t *testing.T) {
	a := newStrArena(0)
	name := a.put("redis-1")
	addr := a.put("10.0.0.1")
	svc := a.put("redis")
	if svc != "redis" || unsafe.StringData(svc) != unsafe.StringData(name) {
		t.Errorf("redis after redis-1: %q at %p, want a part of %p", svc, unsafe.StringData(svc), unsafe.StringData(name))
	}
	if got := a.put("10.0"); unsafe.StringData(got) != unsafe.StringData(addr) {
		t.Errorf("10.0 after 10.0.0.1: not a part of it")
	}
	used := len(a.block)
	web := a.put("web")
	web1 := a.put("web-1")
	if web1 != "web-1" || unsafe.StringData(web1) != unsafe.StringData(web) || len(a.block) != used+len("web-1") {
		t.Errorf("web-1 after web: %q, block %d bytes, want %d and web's start", web1, len(a.block), used+len("web-1"))
	}
	if web != "web" || name != "redis-1" || addr != "10.0.0.1" {
		t.Errorf("strings changed: %q %q %q", web, name, addr)
	}
	if other := a.put("webs"); unsafe.StringData(other) == unsafe.StringData(web) {
		t.Errorf("webs after web-1 shares its bytes")
	}
}

// The tag values that repeat between dataplanes of a file are one copy, even in sets that
// differ (the pods of a StatefulSet, whose sets differ in kuma.io/instance): a Kubernetes
// mesh repeats most values on every pod of a workload or of the mesh.
func TestTagValuesShared(t *testing.T) {
	doc := "type: Dataplane\nmesh: default\nname: POD.team-a\nnetworking:\n  address: ADDR\n  inbound:\n    - port: 8080\n      tags:\n        app: db\n        k8s.kuma.io/namespace: team-a\n        k8s.kuma.io/service-port: \"8080\"\n        kuma.io/instance: POD\n        kuma.io/protocol: tcp\n        kuma.io/service: db_team-a_svc_8080\n        kuma.io/zone: zone-1\n---\n"
	var sb strings.Builder
	for _, d := range [][2]string{{"db-0", "10.0.0.1"}, {"db-1", "10.0.0.2"}} {
		sb.WriteString(strings.NewReplacer("POD", d[0], "ADDR", d[1]).Replace(doc))
	}
	rs, err := Decode("db.yaml", []byte(sb.String()))
	if err != nil || len(rs) != 2 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	a, b := rs[0].(*Dataplane).Networking.Inbound[0].Tags, rs[1].(*Dataplane).Networking.Inbound[0].Tags
	if len(a) != 7 || len(b) != 7 || a.Value("kuma.io/instance") != "db-0" || b.Value("kuma.io/instance") != "db-1" {
		t.Fatalf("tags %v and %v", a, b)
	}
	for i := range a {
		if a[i].Key == "kuma.io/instance" {
			continue
		}
		if a[i] != b[i] || unsafe.StringData(a[i].Value) != unsafe.StringData(b[i].Value) {
			t.Errorf("%s: %q and %q are two copies", a[i].Key, a[i].Value, b[i].Value)
		}
	}
}

// An arena remembers at most maxValues tag values (a file of dataplanes that each have a
// value of their own does not hold a map of them all), and still finds a recent one.
func TestTagValuesRememberedUpToMax(t *testing.T) {
	a := newStrArena(0)
	for i := range 3 * maxValues {
		v := fmt.Sprintf("pod-%d", i)
		if got := a.value(v); got != v {
			t.Fatalf("value %q read back %q", v, got)
		}
		if len(a.values) > maxValues {
			t.Fatalf("%d values remembered, want at most %d", len(a.values), maxValues)
		}
	}
	recent := a.value("pod-x")
	if again := a.value(strings.Clone("pod-x")); unsafe.StringData(again) != unsafe.StringData(recent) {
		t.Error("a value seen just before is copied again")
	}
}

// Tag keys are one copy in the process: dataplanes decoded apart (a file each, or one at a
// time from the control plane) share them.
func TestTagKeysSharedBetweenFiles(t *testing.T) {
	emptyTagKeys(t)
	var keys []string
	for _, name := range []string{"a", "b"} {
		rs, err := Decode(name+".yaml", []byte("type: Dataplane\nmesh: default\nname: "+name+"\nnetworking:\n  address: 10.0.0.2\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: web\n"))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, rs[0].(*Dataplane).Networking.Inbound[0].Tags[0].Key)
	}
	if keys[0] != ServiceTag || unsafe.StringData(keys[0]) != unsafe.StringData(keys[1]) {
		t.Errorf("two files hold two copies of %s", ServiceTag)
	}
}

// A text of one Kubernetes dataplane (mostly keys and indentation) holds its strings in one
// block they fill, not in a block of a third of the text.
func TestOneResourceBlockFitsItsStrings(t *testing.T) {
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strings.ReplaceAll(string(raw), "NAME", "web"))
	emptyTagKeys(t) // other tests' keys may have filled it
	nodes, err := parseDocumentItems(text)
	if err != nil || len(nodes) != 1 {
		t.Fatal(len(nodes), err)
	}
	a := newStrArena(len(text))
	a.fit(nodes[0])
	r, errs, redo := decodeQuickIn(a, NewSource("f", 1), nodes[0], text)
	if len(errs) > 0 || redo {
		t.Fatal(errs, redo)
	}
	dp := r.(*Dataplane)
	block := unsafe.SliceData(a.block)
	in := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= uintptr(unsafe.Pointer(block)) && p+uintptr(len(s)) <= uintptr(unsafe.Pointer(block))+uintptr(cap(a.block))
	}
	if c := cap(a.block); c > 128 {
		t.Errorf("a %d-byte text's strings in a block of %d bytes, want at most 128", len(text), c)
	}
	for _, s := range []string{dp.Name, dp.Networking.Address, dp.Networking.Inbound[0].Tags.Value(ServiceTag)} {
		if !in(s) {
			t.Errorf("%q is not in the one block", s)
		}
	}
}

// emptyTagKeys empties the process's table of tag keys for the test, and gives its keys
// back after it.
func emptyTagKeys(t *testing.T) {
	tagKeys.mu.Lock()
	saved := tagKeys.m
	tagKeys.m = nil
	tagKeys.mu.Unlock()
	t.Cleanup(func() {
		tagKeys.mu.Lock()
		tagKeys.m = saved
		tagKeys.mu.Unlock()
	})
}

// A second pod of a workload adds its name and address to the file's strings, nothing
// else: its tag values, state and transparent proxying's ipFamilyMode are the first pod's.
func TestSecondPodAddsItsOwnStrings(t *testing.T) {
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, address string) []byte {
		return kubePodText(bytes.ReplaceAll(raw, []byte("10.42.0.12"), []byte(address)), name, "web")
	}
	a := newStrArena(0)
	decode := func(text []byte) *Dataplane {
		t.Helper()
		nodes, err := parseDocumentItems(text)
		if err != nil {
			t.Fatal(err)
		}
		r, errs, redo := decodeQuickIn(a, NewSource("f", 1), nodes[0], text)
		if len(errs) > 0 || redo {
			t.Fatal(errs, redo)
		}
		return r.(*Dataplane)
	}
	decode(pod("web-7d9f8c5b4-x2kfp.kuma-demo", "10.42.0.12"))
	// the first pod's last two strings, which a string equal to one of them (or to the
	// beginning of one) shares (put), depend on the order its fields' map is read in: left
	// out, a string the second pod copies again is counted every run
	a.last, a.prev = "", ""
	used := len(a.block)
	second := decode(pod("web-7d9f8c5b4-q8wzt.kuma-demo", "10.42.0.13"))
	if tp := second.Networking.TransparentProxying(); tp == nil || tp.IPFamilyMode != "DualStack" {
		t.Fatalf("transparent proxying read back %+v", tp)
	}
	if grew, want := len(a.block)-used, len("web-7d9f8c5b4-q8wzt.kuma-demo")+len("10.42.0.13"); grew != want {
		t.Errorf("the second pod added %d bytes of strings, want %d (its name and address)", grew, want)
	}
}

// The blocks of a large text are sized to what the rest of the text will likely need: a
// piece of a Kubernetes inventory (1 MB of text, 33 bytes of strings every 900 bytes) ends
// in a block its strings nearly fill, not in a 32 KiB one they fill a sixth of.
func TestLastBlockSizedToTheRest(t *testing.T) {
	const text, every = 1_000_000, 900
	a := newStrArena(text)
	allocated, used := 0, 0
	for at := 0; at+every <= text; at += every {
		a.reading(text - at)
		s := fmt.Sprintf("web-%07d-x2kfp.team-a 10.%06d", at, at) // none begins another
		before := unsafe.SliceData(a.block)
		a.put(s)
		if unsafe.SliceData(a.block) != before {
			allocated += cap(a.block)
		}
		used += len(s)
	}
	if empty := allocated - used; empty > used/8+1024 {
		t.Errorf("%d bytes of blocks for %d bytes of strings: %d empty", allocated, used, empty)
	}
}

const kubeDataplane = "../testdata/kuma/kubernetes-dataplane.yaml"

// kubePodText is kubeDataplane (raw) as the pod name of workload app.
func kubePodText(raw []byte, name, app string) []byte {
	return []byte(strings.NewReplacer("\nname: NAME", "\nname: "+name, "NAME", app).Replace(string(raw)))
}

// kubePod is kubeDataplane as the pod name of workload app, decoded alone (as the control
// plane's link decodes a resource).
func kubePod(t *testing.T, name, app string) *Dataplane {
	t.Helper()
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := DecodeFromControlPlane("control plane Dataplane/"+name, kubePodText(raw, name, app))
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].(*Dataplane)
}

// BenchmarkBytesPerDataplaneDecodedAlone reports the heap 10,000 Kubernetes dataplanes hold
// once decoded one at a time, as the control plane's link decodes them (each its own text,
// the source its kind's, "control plane Dataplane"): replicas=5, 2,000 workloads of 5 pods;
// replicas=1, 10,000 workloads of one.
//
//	go test -run '^$' -bench BytesPerDataplaneDecodedAlone -benchtime 3x ./mesh
func BenchmarkBytesPerDataplaneDecodedAlone(b *testing.B) {
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	for _, replicas := range []int{5, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			texts, names := make([][]byte, n), make([]string, n)
			round := 0
			for b.Loop() {
				round++ // names new to the process each round, as its first sync's are
				for i := range texts {
					app := fmt.Sprintf("app%d", i/replicas)
					names[i] = fmt.Sprintf("%s-%d-%05d.kuma-demo", app, round, i)
					texts[i] = kubePodText(raw, names[i], app)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				kept := make([]Resource, 0, n)
				for _, text := range texts {
					rs, err := DecodeFromControlPlane("control plane Dataplane", text)
					if err != nil {
						b.Fatal(err)
					}
					kept = append(kept, rs...)
				}
				runtime.GC()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/dataplane")
				runtime.KeepAlive(kept)
				runtime.KeepAlive(texts) // counted in both readings
				runtime.KeepAlive(names)
			}
		})
	}
}

// Replicas decoded apart (the control plane sends a resource at a time) share one tag set
// as a file's do; a set of another workload, a set Kuma gives one pod alone
// (kuma.io/instance) and a universal dataplane's one tag are their own.
func TestReplicasDecodedApartShareTags(t *testing.T) {
	first := func(dp *Dataplane) *Tag { return &dp.Networking.Inbound[0].Tags[0] }
	a, b := kubePod(t, "web-7d9f8c5b4-x2kfp.kuma-demo", "web"), kubePod(t, "web-7d9f8c5b4-q8wzt.kuma-demo", "web")
	if first(a) != first(b) {
		t.Error("two replicas decoded apart hold two tag sets")
	}
	if other := kubePod(t, "api-5c8d7b9f6-mm2xq.kuma-demo", "api"); first(other) == first(a) || other.Networking.Inbound[0].Tags.Value("app") != "api" {
		t.Errorf("another workload's pod holds %v", other.Networking.Inbound[0].Tags)
	}
	if b.Name != "web-7d9f8c5b4-q8wzt.kuma-demo" || b.Networking.Inbound[0].Tags.Value("app") != "web" {
		t.Errorf("the second replica read back as %s %v", b.Name, b.Networking.Inbound[0].Tags)
	}
	doc := "type: Dataplane\nmesh: default\nname: db-0.x\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 5432\n      tags:\n        app: db\n        k8s.kuma.io/namespace: x\n        kuma.io/instance: db-0\n        kuma.io/service: db_x_svc_5432\n"
	var own []*Tag
	for range 2 {
		for _, d := range []string{doc, "type: Dataplane\nmesh: default\nname: u\nnetworking:\n  address: 10.0.0.1\n  inbound:\n    - port: 80\n      tags:\n        kuma.io/service: u\n"} {
			rs, err := DecodeFromControlPlane("control plane", []byte(d))
			if err != nil {
				t.Fatal(err)
			}
			own = append(own, &rs[0].(*Dataplane).Networking.Inbound[0].Tags[0])
		}
	}
	if own[0] == own[2] || own[1] == own[3] {
		t.Error("a set with kuma.io/instance, or of one tag, is shared between dataplanes decoded apart")
	}
}

// The entries of the sets no dataplane holds any more are dropped: the table does not
// grow with every set ever decoded.
func TestLiveSetsOfCollectedSetsDropped(t *testing.T) {
	decodeMany := func(prefix string, n int) []*Dataplane {
		out := make([]*Dataplane, n)
		for i := range out {
			out[i] = kubePod(t, fmt.Sprintf("%s%d-7d9f8c5b4-x2kfp.kuma-demo", prefix, i), fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	kept := decodeMany("gone", 3000)
	liveSets.mu.Lock()
	held := len(liveSets.m)
	liveSets.mu.Unlock()
	if held < 3000 {
		t.Fatalf("%d sets in the table, want 3,000 or more", held)
	}
	runtime.KeepAlive(kept)
	kept = nil
	runtime.GC()
	runtime.GC()
	later := decodeMany("new", 3000)
	liveSets.mu.Lock()
	held = len(liveSets.m)
	liveSets.mu.Unlock()
	if held > 4096 {
		t.Errorf("%d sets in the table after 3,000 were collected and 3,000 decoded, want at most 4,096", held)
	}
	runtime.KeepAlive(later)
}

// A replica decoded alone takes its workload's tag set without copying the values: its
// text's block holds its own strings (name, address, and the mesh's name and
// ipFamilyMode, which a text of one resource copies once), nothing of its tags.
func TestReplicaDecodedAloneCopiesNoValues(t *testing.T) {
	emptyTagKeys(t) // other tests' keys may have filled it
	first := kubePod(t, "web-7d9f8c5b4-x2kfp.kuma-demo", "web")
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		t.Fatal(err)
	}
	name := "web-7d9f8c5b4-q8wzt.kuma-demo"
	text := kubePodText(raw, name, "web")
	a := newStrArena(len(text))
	rs, err := decodeAllIn(a, "f", text) // as Decode and DecodeFromControlPlane decode it
	if err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
	second := rs[0].(*Dataplane)
	if &second.Networking.Inbound[0].Tags[0] != &first.Networking.Inbound[0].Tags[0] {
		t.Fatal("the replica does not hold its workload's tag set")
	}
	own := len(name) + len(second.Networking.Address) + len("default") + len("DualStack")
	if a.used != own || cap(a.block) > 64 {
		t.Errorf("the replica's text holds %d bytes of strings in a block of %d, want %d (its own)", a.used, cap(a.block), own)
	}
	runtime.KeepAlive(first)
}

// A tag key longer than a Kubernetes label key's longest stays in its file's strings: the
// process's table of keys, which lives as long as the process, holds at most
// maxInterned keys of maxTagKey bytes.
func TestLongTagKeyNotHeldByTheProcess(t *testing.T) {
	emptyTagKeys(t)
	long := strings.Repeat("k", maxTagKey+1)
	a := newStrArena(0)
	if got := a.key(long); got != long || !a.holds(got) {
		t.Errorf("a %d-byte key is not the file's own copy", len(long))
	}
	if _, held := tagKeys.m[long]; held {
		t.Errorf("a %d-byte key is held by the process", len(long))
	}
	if got := a.key("app"); tagKeys.m["app"] != got {
		t.Error("a short key is not the process's copy")
	}
}

// A large text's blocks are sized as it is decoded (decodeAll tells its arena how much of
// the text is left): the last block of a piece of a Kubernetes inventory is not a 32 KiB
// block its last strings fill a part of.
func TestDecodedTextsLastBlockSizedToTheRest(t *testing.T) {
	raw, err := os.ReadFile(kubeDataplane)
	if err != nil {
		t.Fatal(err)
	}
	var text []byte
	for i := range 1100 {
		app := fmt.Sprintf("app%d", i/5)
		text = append(append(text, "---\n"...), kubePodText(raw, fmt.Sprintf("%s-7d9f8c5b4-%05d.kuma-demo", app, i), app)...)
	}
	a := newStrArena(len(text))
	if rs, err := decodeAllIn(a, "inventory.yaml", text); err != nil || len(rs) != 1100 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	if empty := cap(a.block) - len(a.block); empty > len(a.block)/8+1024 {
		t.Errorf("the last block holds %d bytes of strings, %d empty (of %d)", len(a.block), empty, cap(a.block))
	}
}
