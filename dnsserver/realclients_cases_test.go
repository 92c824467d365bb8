package dnsserver

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// TestRealClients resolves through the resolver libraries applications really use, against
// the resolver on port 53 of a private network namespace whose /etc/resolv.conf is the
// Kubernetes one (search default.svc.cluster.local svc.cluster.local cluster.local,
// ndots:5), then with the options glibc, musl, Go and c-ares read (single-request(-reopen),
// edns0, trust-ad, use-vc, rotate, an IPv6 nameserver). The table is the bundled example
// mesh's (testdata/mesh, as `kuma-dp run` serves it) plus an IPv4-only, an IPv6-only and a
// very long name; names it does not own go to an upstream stub in the namespace. Every
// answer is checked against the table and the stub's zone: VIPs through search-domain
// expansion, AAAA twins, NODATA for a family a name lacks, NXDOMAIN, PTR, answers too big
// for UDP (TC, then TCP). Needs root (namespaces, port 53); a client whose runtime is
// missing is skipped with its name.
func TestRealClients(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network and mount namespaces, port 53): skipping the real-client tests")
	}
	t.Parallel() // each in its own namespaces
	realClientsTest(t, "", nil)
}

// TestRealClientsAgent is the same through the real `kuma-dp run` (built from ../cmd/kuma-dp)
// on the bundled example mesh, as docs/run.md starts it, with --dns-proxy-port 53 and the
// upstream stub as --dns-upstream: the agent's wiring (flags, resolv.conf, table) seen by
// real clients. Fewer resolv.conf variants: the resolver is the same.
func TestRealClientsAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network and mount namespaces, port 53): skipping the real-client tests")
	}
	t.Parallel() // each in its own namespaces
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH: cannot build kuma-dp for the real-client agent test")
	}
	bin := filepath.Join(t.TempDir(), "kuma-dp")
	if out, err := exec.Command(goBin, "build", "-o", bin, "../cmd/kuma-dp").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/kuma-dp: %v\n%s", err, out)
	}
	realClientsTest(t, bin, []string{"ndots5", "use-vc", "ipv6 nameserver", "upstream down"})
}

// realClientsTest runs every client under every resolv.conf variant (only those named in
// only, when given) against the resolver in a namespace: the package's Server, or the
// kuma-dp binary agent when not empty.
func realClientsTest(t *testing.T, agent string, only []string) {
	w := newWorld(t, agent == "")
	dir := t.TempDir()
	raw, err := json.Marshal(w.table.Available())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"table.json":    string(raw),
		"resolv.conf":   kubeResolvConf(nsResolver4),
		"nsswitch.conf": "hosts: files dns\n",
		"hosts":         "127.0.0.1 localhost\n::1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ns := startNamespace(t, dir, agent)
	clients := realClients(t)
	queries := w.queries()

	kube := func(name, conf string) variant {
		return variant{name: name, conf: conf, search: searchDomains, ndots: 5}
	}
	k8s := kubeResolvConf(nsResolver4)
	variants := []variant{
		kube("ndots5", k8s),
		kube("single-request-reopen", k8s+"options single-request-reopen\n"),
		kube("single-request", k8s+"options single-request\n"),
		kube("edns0 trust-ad", k8s+"options edns0 trust-ad\n"),
		kube("use-vc", k8s+"options use-vc\n"),
		kube("ipv6 nameserver", kubeResolvConf(nsResolver6)),
		kube("rotate", kubeResolvConf(nsResolver4, nsResolver6)+"options rotate\n"),
		// a VM: no search domains (names as written; short names are not found)
		{name: "vm no search", conf: "nameserver " + nsResolver4 + "\n", ndots: 1},
		// the default ndots:1 with the search list: dotted names are asked as written first
		{name: "ndots1 search", conf: "nameserver " + nsResolver4 + "\nsearch " + strings.Join(searchDomains, " ") + "\n",
			search: searchDomains, ndots: 1},
		// musl waits its whole timeout on SERVFAIL (it retries, then ignores the answer):
		// timeout:1 keeps that short
		{name: "upstream down", conf: k8s + "options timeout:1 attempts:1\n", search: searchDomains, ndots: 5, upstreamDown: true},
	}
	if only != nil {
		variants = slices.DeleteFunc(variants, func(v variant) bool { return !slices.Contains(only, v.name) })
	}
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if strings.Contains(v.conf, nsResolver6) && !ns.ipv6 {
				t.Skip("no IPv6 loopback in the namespace: skipping the IPv6 nameserver variant")
			}
			ns.setResolvConf(t, v.conf)
			if v.upstreamDown {
				ns.upstreamDown(t)
			}
			for _, c := range clients {
				// A client whose resolv.conf options do not reach it (or whose library is
				// tested through another client) runs on the first variant, and on the
				// variants it lists, only: no subtest at all elsewhere, rather than a skip
				// that would happen on every run.
				if i > 0 && (c.firstVariantOnly || c.variants != nil && !slices.Contains(c.variants, v.name)) {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					t.Parallel() // the clients of one variant side by side; the variant waits for them
					if c.skip != "" {
						t.Skip(c.skip)
					}
					var qs []string
					for _, q := range queries {
						if v.upstreamDown && !w.local(v, q) && !strings.Contains(q, "outage.") {
							// answered from cache, or failed, depending on what was asked before
							continue
						}
						if !v.upstreamDown && strings.Contains(q, "outage.") {
							continue // asked first once the upstream is down: nothing cached
						}
						if strings.Contains(q, "outage.") && (c.servfail == servfailSlow ||
							c.servfail == servfailTimeout && q != "0:outage.example.org") {
							continue // each waits a timeout out: one (or none) is enough
						}
						if strings.Contains(c.fams, q[:1]) && !(c.noSearch && w.needsSearch(q[2:])) {
							qs = append(qs, q)
						}
					}
					got := c.run(t, ns, qs)
					w.check(t, c, v, qs, got)
				})
			}
		})
	}
}

func kubeResolvConf(nameservers ...string) string {
	var b strings.Builder
	for _, n := range nameservers {
		b.WriteString("nameserver " + n + "\n")
	}
	b.WriteString("search " + strings.Join(searchDomains, " ") + "\noptions ndots:5\n")
	return b.String()
}

// world is what every answer is checked against: the table and the stub's zone, as a
// client walking the Kubernetes search list sees them.
type world struct {
	table                *vipalloc.Table
	v4only, v6only, long *vipalloc.Entry
}

// newWorld builds the table `kuma-dp run` serves for the bundled example mesh, plus three
// names of our own: IPv4 only, IPv6 only, and one long enough that its answer through a
// search domain overflows 512 bytes.
func newWorld(t *testing.T, extras bool) *world {
	t.Helper()
	alloc, err := vipalloc.New(vipalloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := mesh.Load("../testdata/mesh/dataplane.yaml", "../testdata/mesh/policies")
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := alloc.Allocate(snap)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{
		v4only: entry("v4only.kdp-test.mesh", "255.0.0.4", "", "v4"),
		v6only: entry("v6only.kdp-test.mesh", "", "fd00:fd00::ff00:6", "v6"),
		long:   entry(longName, "255.0.0.5", "fd00:fd00::ff00:5", "long"),
	}
	for _, e := range []*vipalloc.Entry{w.v4only, w.v6only, w.long} {
		for _, a := range []netip.Addr{e.IPv4(), e.IPv6()} {
			if other, ok := tbl.LookupAddr(a); a.IsValid() && ok {
				t.Fatalf("test VIP %s of %s is taken by %s in the example mesh", a, e.Hostname(), other.Hostname())
			}
		}
	}
	if !extras { // the agent serves the example mesh alone
		w.table = tbl
		return w
	}
	w.table = vipalloc.NewTable(append(tbl.Available(), w.v4only, w.v6only, w.long), nil)
	return w
}

// queries are the client's arguments, "F:NAME" (F: 0 any family, 4, 6, p reverse).
func (w *world) queries() []string {
	var qs []string
	var mes, plain *vipalloc.Entry
	for _, e := range w.table.Available() {
		// every hostname of the example mesh, short, as an application writes it: with
		// ndots:5 the client tries it under each search domain first
		qs = append(qs, "0:"+e.Hostname())
		if e.MeshExternalService() != "" || strings.HasPrefix(e.IPv4().String(), "242.") {
			mes = e
		} else if plain == nil && strings.HasSuffix(e.Hostname(), ".mesh") && strings.Count(e.Hostname(), ".") == 1 {
			plain = e
		}
	}
	for _, e := range []*vipalloc.Entry{plain, mes} {
		if e == nil {
			continue
		}
		h := e.Hostname()
		qs = append(qs, "4:"+h, "6:"+h, "0:"+strings.ToUpper(h), "0:"+h+".", "0:"+h+"."+searchDomains[1],
			"p:"+e.IPv4().String(), "p:"+e.IPv6().String())
	}
	if _, ok := w.table.Lookup(w.v4only.Hostname()); ok {
		qs = append(qs, "0:"+w.v4only.Hostname(), "6:"+w.v4only.Hostname(), "4:"+w.v6only.Hostname(), "0:"+w.v6only.Hostname(),
			"0:"+w.long.Hostname(), "6:"+w.long.Hostname(), "p:"+w.v6only.IPv6().String())
	}
	qs = append(qs,
		"0:example.org", "4:example.org", "6:example.org",
		"0:v4only.example.org", "6:v4only.example.org",
		"0:big.example.org", "4:big.example.org", "6:big.example.org",
		"0:upsvc", "4:upsvc",
		"0:nope.example.org", "0:nope.mesh", "4:nope-"+w.v4only.Hostname(),
		// an address of the VIP range that is no VIP: forwarded, NXDOMAIN
		"p:"+w.unallocated(),
		// asked only once the upstream is down (upstream down variant)
		"0:outage.example.org", "4:outage.example.org", "6:outage.example.org", "0:outage.",
	)
	return qs
}

// variant is one resolv.conf the clients read: its text and what the model needs of it.
type variant struct {
	name, conf string
	search     []string
	ndots      int
	// upstreamDown: the stub is stopped first (the last variant): names the table owns
	// still resolve, the others fail as a failure (SERVFAIL), not as not found
	upstreamDown bool
}

// unallocated is an address of the service VIP range that the table does not hold.
func (w *world) unallocated() string {
	for a := netip.MustParseAddr("240.0.0.1"); ; a = a.Next() {
		if _, ok := w.table.LookupAddr(a); !ok {
			return a.String()
		}
	}
}

// candidates is the order a stub resolver tries name in (resolv.conf(5)): as written first
// when it has ndots dots or more, then under each search domain, then as written.
func (v variant) candidates(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{strings.TrimSuffix(name, ".")}
	}
	var out []string
	for _, sd := range v.search {
		out = append(out, name+"."+sd)
	}
	if strings.Count(name, ".") >= v.ndots {
		return append([]string{name}, out...)
	}
	return append(out, name)
}

// owner resolves one fully qualified name: a table entry (itself or under a search
// domain) or a stub record.
func (w *world) owner(fqdn string) (v4, v6 []string, ok bool) {
	fqdn = strings.ToLower(fqdn)
	names := []string{fqdn}
	for _, sd := range searchDomains {
		if strings.HasSuffix(fqdn, "."+sd) {
			names = append(names, strings.TrimSuffix(fqdn, "."+sd))
		}
	}
	for _, n := range names {
		if e, found := w.table.Lookup(n); found && e.Status == vipalloc.Available {
			if e.IPv4().IsValid() {
				v4 = []string{e.IPv4().String()}
			}
			if e.IPv6().IsValid() {
				v6 = []string{e.IPv6().String()}
			}
			return v4, v6, true
		}
	}
	r, ok := stubZone[fqdn]
	return r.v4, r.v6, ok
}

// needsSearch: the name resolves only through a search domain.
func (w *world) needsSearch(name string) bool {
	_, _, direct := w.owner(strings.TrimSuffix(name, "."))
	return !direct
}

// expect is the answer a correct resolver gives: the addresses, or nil (not found).
func (w *world) expect(c *realClient, v variant, q string) []string {
	fam, name := q[0], q[2:]
	if v.upstreamDown && !w.local(v, q) {
		return nil // not ours, and the upstream is down: a failure ("again"), not an answer
	}
	if fam == 'p' {
		e, ok := w.table.LookupAddr(netip.MustParseAddr(name))
		if !ok {
			return nil
		}
		return []string{e.Hostname()}
	}
	for _, cand := range v.candidates(name) {
		v4, v6, ok := w.owner(cand)
		if !ok {
			continue
		}
		switch fam {
		case '4':
			return v4
		case '6':
			if len(v6) == 0 && c.v4mapped {
				var m []string
				for _, a := range v4 {
					m = append(m, "::ffff:"+a)
				}
				return m
			}
			return v6
		default:
			return append(slices.Clone(v4), v6...)
		}
	}
	return nil
}

// local: the client's first try at q is answered by the resolver itself, from the table.
func (w *world) local(v variant, q string) bool {
	if q[0] == 'p' {
		_, ok := w.table.LookupAddr(netip.MustParseAddr(q[2:]))
		return ok
	}
	first := strings.ToLower(v.candidates(q[2:])[0])
	if e, ok := w.table.Lookup(first); ok && e.Status == vipalloc.Available {
		return true
	}
	for _, sd := range searchDomains {
		if e, ok := w.table.Lookup(strings.TrimSuffix(first, "."+sd)); ok && e.Status == vipalloc.Available && first != e.Hostname() {
			return true
		}
	}
	return false
}

// check compares a client's output lines ("F\tNAME\tok\tA,B" or "F\tNAME\terr\tKIND\tMSG")
// with the world's answers.
func (w *world) check(t *testing.T, c *realClient, v variant, queries []string, out string) {
	t.Helper()
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "\t", 5)
		if len(f) < 4 {
			continue
		}
		got[f[0]+":"+f[1]] = f[2:]
	}
	var failed int
	for _, q := range queries {
		want := w.expect(c, v, q)
		wantKind := "notfound" // a negative answer, not a failure
		if v.upstreamDown && !w.local(v, q) {
			wantKind = "again" // a failure, not a negative answer (that a client would cache)
		}
		res, ok := got[q]
		switch {
		case !ok:
			t.Errorf("%s %s: no result in the output", c.name, q)
		case res[0] == "ok" && want == nil:
			t.Errorf("%s %s: resolved to %s, want not found", c.name, q, res[1])
		case res[0] == "ok" && c.noTCPFallback:
			g, all := normalizeAddrs(res[1]), normalizeAddrs(strings.Join(want, ","))
			if len(g) == 0 || slices.ContainsFunc(g, func(a string) bool { return !slices.Contains(all, a) }) {
				t.Errorf("%s %s: got %v, want a part of %v (no TCP fallback)", c.name, q, g, want)
			} else {
				continue
			}
		case res[0] == "ok":
			if g := normalizeAddrs(res[1]); !slices.Equal(g, normalizeAddrs(strings.Join(want, ","))) {
				t.Errorf("%s %s: got %v, want %v", c.name, q, g, want)
			} else {
				continue
			}
		case want != nil:
			t.Errorf("%s %s: failed (%s), want %v", c.name, q, strings.Join(res[1:], " "), want)
		case res[1] != wantKind && !c.opaqueErrors:
			t.Errorf("%s %s: failed with %s, want %s", c.name, q, strings.Join(res[1:], " "), wantKind)
		default:
			continue
		}
		failed++
	}
	if failed > 0 {
		t.Logf("%s output:\n%s", c.name, out)
	}
}

// normalizeAddrs sorts a comma list of addresses or names, without duplicates, in canonical
// form (Java writes IPv6 uncompressed).
func normalizeAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a == "" {
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			a = ip.String()
		} else {
			a = strings.TrimSuffix(strings.ToLower(a), ".")
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// servfailKind is how a client takes a SERVFAIL (the upstream down variant).
type servfailKind int

const (
	servfailFast    servfailKind = iota // a failure at once
	servfailTimeout                     // waits resolv.conf's timeout out (musl): one such query is asked
	servfailSlow                        // waits its own timeout out, seconds per search-list try (Erlang): none is asked
)

// realClient is one resolver library, driven by a program that prints gai.c's lines.
type realClient struct {
	name     string
	skip     string // why it cannot run here
	fams     string // query families it takes
	v4mapped bool   // family 6 falls back to IPv4-mapped addresses (AI_V4MAPPED)
	noSearch bool   // does not walk the search list: names only found through it are left out
	// noTCPFallback: a truncated answer is used as it is (musl before 1.2.4): a name whose
	// answer does not fit 512 bytes gets the records that fit, a non-empty part of them
	noTCPFallback bool
	opaqueErrors  bool // its failures do not tell not found from a failure to resolve
	servfail      servfailKind
	// firstVariantOnly: resolv.conf options do not change it; variants: the others it runs on
	firstVariantOnly bool
	variants         []string
	run              func(t *testing.T, ns *nsEnv, queries []string) string
}

const clientTimeout = 60 * time.Second

// output runs cmd (made by ns.command) and returns its stdout; a crash or a hang fails the test.
func output(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	timer := time.AfterFunc(clientTimeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\nstderr: %s\nstdout: %s", cmd.Args, err, stderr.String(), out)
	}
	return string(out)
}

func realClients(t *testing.T) []*realClient {
	t.Helper()
	clientsDir, err := filepath.Abs("../test/clients")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	missing := func(bin, what string) string {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " not installed: skipping " + what
		}
		return ""
	}
	var cs []*realClient

	cs = append(cs, &realClient{name: "getent (glibc getaddrinfo)", fams: "046p", v4mapped: true, opaqueErrors: true,
		skip: missing("getent", "glibc's getent"), run: runGetent})

	for _, cc := range []struct{ name, compiler, what string }{
		{"C glibc getaddrinfo", "gcc", "the glibc C client (Debian package gcc)"},
		{"C musl getaddrinfo", "musl-gcc", "the musl client (Debian package musl-tools)"},
	} {
		c := &realClient{name: cc.name, fams: "046p", skip: missing(cc.compiler, cc.what)}
		if c.skip == "" {
			bin := filepath.Join(t.TempDir(), "gai")
			if out, err := exec.Command(cc.compiler, "-O1", "-o", bin, filepath.Join(clientsDir, "gai.c")).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cc.compiler, err, out)
			}
			c.run = func(t *testing.T, ns *nsEnv, qs []string) string { return output(t, ns.command(nil, bin, qs...)) }
			if cc.compiler == "musl-gcc" {
				v := muslVersion(t, bin)
				c.name += " " + v
				c.noTCPFallback = versionLess(v, "1.2.4") // musl 1.2.4 added the TCP retry
				c.servfail = servfailTimeout
			}
		}
		cs = append(cs, c)
	}

	cs = append(cs, &realClient{name: "Go pure resolver", fams: "046p",
		run: func(t *testing.T, ns *nsEnv, qs []string) string {
			return output(t, ns.command([]string{roleEnv + "=" + roleLookup, "GODEBUG=netdns=go"}, self, qs...))
		}})
	goCgo := &realClient{name: "Go cgo resolver", fams: "046p"}
	if !cgoResolver {
		goCgo.skip = "test binary built without cgo (CGO_ENABLED=0): skipping Go's cgo resolver"
	}
	goCgo.run = func(t *testing.T, ns *nsEnv, qs []string) string {
		cmd := ns.command([]string{roleEnv + "=" + roleLookup, "GODEBUG=netdns=cgo+2"}, self, qs...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "= cgo") {
			t.Fatalf("GODEBUG=netdns=cgo did not use the cgo resolver:\n%s", stderr.String())
		}
		return string(out)
	}
	cs = append(cs, goCgo)

	py := &realClient{name: "Python socket.getaddrinfo", fams: "046p", skip: missing("python3", "the Python client")}
	py.run = func(t *testing.T, ns *nsEnv, qs []string) string {
		return output(t, ns.command(nil, "python3", append([]string{filepath.Join(clientsDir, "lookup.py")}, qs...)...))
	}
	cs = append(cs, py)

	nodeMissing := missing("node", "the Node.js clients")
	node := func(mode string) func(t *testing.T, ns *nsEnv, qs []string) string {
		return func(t *testing.T, ns *nsEnv, qs []string) string {
			return output(t, ns.command(nil, "node", append([]string{filepath.Join(clientsDir, "lookup.js"), mode}, qs...)...))
		}
	}
	cs = append(cs,
		&realClient{name: "Node dns.lookup (getaddrinfo)", fams: "046p", skip: nodeMissing, run: node("lookup")},
		&realClient{name: "Node dns.resolve (c-ares)", fams: "046p", noSearch: true, skip: nodeMissing, run: node("resolve")},
		&realClient{name: "Node Resolver.setServers (c-ares)", fams: "046p", noSearch: true, skip: nodeMissing,
			firstVariantOnly: true, run: node("resolve@" + nsResolver4 + ":53")})

	java := &realClient{name: "Java InetAddress", fams: "0p", skip: missing("java", "the Java client"), opaqueErrors: true,
		variants: []string{"use-vc", "ipv6 nameserver"}}
	java.run = func(t *testing.T, ns *nsEnv, qs []string) string {
		return output(t, ns.command(nil, "java", append([]string{filepath.Join(clientsDir, "Lookup.java")}, qs...)...))
	}
	cs = append(cs, java)

	cs = append(cs, &realClient{name: "host (bind9)", fams: "46p", skip: missing("host", "host (Debian package bind9-host)"),
		firstVariantOnly: true, run: runHost})

	// DNS clients written in their own language (no libc resolver underneath)
	ruby := &realClient{name: "Ruby Resolv::DNS", fams: "046p", opaqueErrors: true, skip: missing("ruby", "the Ruby client")}
	ruby.run = func(t *testing.T, ns *nsEnv, qs []string) string {
		return output(t, ns.command(nil, "ruby", append([]string{filepath.Join(clientsDir, "lookup.rb")}, qs...)...))
	}
	erl := &realClient{name: "Erlang inet_res", fams: "046p", skip: missing("escript", "the Erlang client (Debian package erlang-base)"),
		variants: []string{"use-vc", "rotate", "upstream down"}, servfail: servfailSlow}
	erl.run = func(t *testing.T, ns *nsEnv, qs []string) string {
		return output(t, ns.command(nil, "escript", append([]string{filepath.Join(clientsDir, "lookup.escript")}, qs...)...))
	}
	dnspy := &realClient{name: "Python dnspython", fams: "046p",
		skip: "no python3 with dnspython (Debian package python3-dnspython): skipping the dnspython client"}
	for _, py := range []string{"python3", "/usr/bin/python3"} { // PATH's may be a pyenv one without it
		if exec.Command(py, "-c", "import dns.resolver").Run() == nil {
			dnspy.skip = ""
			dnspy.run = func(t *testing.T, ns *nsEnv, qs []string) string {
				return output(t, ns.command(nil, py, append([]string{filepath.Join(clientsDir, "lookup_dnspython.py")}, qs...)...))
			}
			break
		}
	}
	cs = append(cs, ruby, erl, dnspy, &realClient{name: "busybox nslookup", fams: "046p", noTCPFallback: true,
		skip: missing("busybox", "busybox nslookup (Debian package busybox)"), firstVariantOnly: true, run: runBusybox})
	return cs
}

// muslVersion is the version of the musl a binary is linked with, from its dynamic
// loader (which prints it when run alone).
func muslVersion(t *testing.T, bin string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(strings.TrimRight(string(b), "\x00")).CombinedOutput() // exits 1
		if m := regexp.MustCompile(`Version (\d+\.\d+\.\d+)`).FindSubmatch(out); m != nil {
			return string(m[1])
		}
	}
	t.Fatalf("%s: no musl version found (static binary, or not musl)", bin)
	return ""
}

// versionLess compares dotted version numbers.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// runGetent resolves each query with getent: ahosts (AF_UNSPEC), ahostsv4, ahostsv6
// (AF_INET6 with AI_V4MAPPED) and hosts (gethostbyaddr) for reverse lookups.
func runGetent(t *testing.T, ns *nsEnv, qs []string) string {
	var b strings.Builder
	for _, q := range qs {
		fam, name := q[0], q[2:]
		db := map[byte]string{'0': "ahosts", '4': "ahostsv4", '6': "ahostsv6", 'p': "hosts"}[fam]
		cmd := ns.command(nil, "getent", db, name)
		ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
		out, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).Output()
		cancel()
		var ee *exec.ExitError
		switch {
		case err == nil:
			var addrs []string
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.Fields(line)
				if fam == 'p' && len(f) >= 2 {
					addrs = append(addrs, f[1])
				} else if len(f) > 0 {
					addrs = append(addrs, f[0])
				}
			}
			b.WriteString(string(fam) + "\t" + name + "\tok\t" + strings.Join(addrs, ",") + "\n")
		case errors.As(err, &ee) && ee.ExitCode() == 2:
			b.WriteString(string(fam) + "\t" + name + "\terr\tnotfound\texit 2\n")
		default:
			b.WriteString(string(fam) + "\t" + name + "\terr\tother\t" + err.Error() + "\n")
		}
	}
	return b.String()
}

var (
	bbAddr   = regexp.MustCompile(`(?m)^Address: (\S+)$`) // answers; the server's line has a tab
	bbPTR    = regexp.MustCompile(`name = (\S+)`)
	bbNoRec  = regexp.MustCompile(`NXDOMAIN|No answer`)
	hostAddr = regexp.MustCompile(`has (?:IPv6 )?address (\S+)`)
	hostPTR  = regexp.MustCompile(`domain name pointer (\S+)`)
	// NXDOMAIN, NODATA, or NODATA after a CNAME (host prints the alias alone)
	hostNoRec = regexp.MustCompile(`not found: 3\(NXDOMAIN\)|has no (?:A|AAAA) record|is an alias for`)
)

// runBusybox resolves each query with busybox nslookup (its own DNS client, as in Alpine
// images): -type=a, -type=aaaa, both, or a reverse lookup.
func runBusybox(t *testing.T, ns *nsEnv, qs []string) string {
	var b strings.Builder
	for _, q := range qs {
		fam, name := q[0], q[2:]
		args := []string{"nslookup", name}
		if typ := map[byte]string{'4': "a", '6': "aaaa"}[fam]; typ != "" {
			args = []string{"nslookup", "-type=" + typ, name}
		}
		out, _ := ns.command(nil, "busybox", args...).CombinedOutput()
		re := bbAddr
		if fam == 'p' {
			re = bbPTR
		}
		var got []string
		for _, m := range re.FindAllSubmatch(out, -1) {
			got = append(got, string(m[1]))
		}
		flat := strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " ")
		switch {
		case len(got) > 0:
			b.WriteString(string(fam) + "\t" + name + "\tok\t" + strings.Join(got, ",") + "\n")
		case bytes.Contains(out, []byte("SERVFAIL")) || bytes.Contains(out, []byte("timed out")):
			b.WriteString(string(fam) + "\t" + name + "\terr\tagain\t" + flat + "\n")
		case bbNoRec.Match(out) || !bytes.Contains(out, []byte("can't")):
			// NXDOMAIN; NODATA is no answer line at all
			b.WriteString(string(fam) + "\t" + name + "\terr\tnotfound\t" + flat + "\n")
		default:
			b.WriteString(string(fam) + "\t" + name + "\terr\tother\t" + flat + "\n")
		}
	}
	return b.String()
}

// runHost resolves each query with host (bind9), which walks the search list itself.
func runHost(t *testing.T, ns *nsEnv, qs []string) string {
	var b strings.Builder
	for _, q := range qs {
		fam, name := q[0], q[2:]
		args := []string{"-W", "5", "-t", map[byte]string{'4': "A", '6': "AAAA", 'p': "PTR"}[fam], name}
		cmd := ns.command(nil, "host", args...)
		out, _ := cmd.CombinedOutput() // host exits 1 for NXDOMAIN: judged by its output
		re := hostAddr
		if fam == 'p' {
			re = hostPTR
		}
		var got []string
		for _, m := range re.FindAllStringSubmatch(string(out), -1) {
			got = append(got, m[1])
		}
		switch {
		case len(got) > 0:
			b.WriteString(string(fam) + "\t" + name + "\tok\t" + strings.Join(got, ",") + "\n")
		case bytes.Contains(out, []byte("SERVFAIL")) || bytes.Contains(out, []byte("timed out")):
			b.WriteString(string(fam) + "\t" + name + "\terr\tagain\t" + strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " ") + "\n")
		case hostNoRec.Match(out):
			b.WriteString(string(fam) + "\t" + name + "\terr\tnotfound\t" + strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " ") + "\n")
		default:
			b.WriteString(string(fam) + "\t" + name + "\terr\tother\t" + strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " ") + "\n")
		}
	}
	return b.String()
}
