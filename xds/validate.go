package xds

import (
	"errors"
	"fmt"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

type validator interface{ ValidateAll() error }

// Validate checks every resource against Envoy's proto constraints - each resource and each
// typed_config packed inside it, since ValidateAll does not descend into Any - and the
// references between them: every cluster a listener names exists, every EDS cluster has its
// assignment and every assignment its cluster, names and bound addresses are unique.
// All problems are returned, joined.
func (r *Resources) Validate() error {
	err := r.validate()
	r.checked.Store(&checkResult{err: err})
	return err
}

type checkResult struct{ err error }

// checker returns a function that validates one message (unless a Generator already saw it
// pass), appends its error to errs and returns the clusters its tcp_proxy filters name.
func (r *Resources) checker(errs *[]error) func(kind, name string, m proto.Message) []string {
	// The IPv4 and IPv6 listeners of one outbound share their filter: unpack and check each
	// packed config once.
	done := map[*anypb.Any]proto.Message{}
	return func(kind, name string, m proto.Message) []string {
		out := r.checkOne(kind, name, m, done)
		if out.err != nil {
			*errs = append(*errs, out.err)
		}
		return out.refs
	}
}

// checkOut is the result of checking one message: the clusters it names, or its error.
type checkOut struct {
	refs []string
	err  error
}

// checkOne validates one message unless a Generator already saw it pass. done holds the
// packed configs already unpacked and checked.
func (r *Resources) checkOne(kind, name string, m proto.Message, done map[*anypb.Any]proto.Message) checkOut {
	if refs, ok := r.trust.get(m); ok {
		return checkOut{refs: refs}
	}
	var refs []string
	var onTCP func(*tcpproxy.TcpProxy)
	if _, isListener := m.(*listener.Listener); isListener {
		// Only listeners hold tcp_proxy filters (the collector costs an allocation).
		onTCP = func(tp *tcpproxy.TcpProxy) {
			if c := tp.GetCluster(); c != "" {
				refs = append(refs, c)
			}
			for _, w := range tp.GetWeightedClusters().GetClusters() {
				refs = append(refs, w.Name)
			}
		}
	}
	err := validateResource(m, done, r.packed, onTCP)
	if err != nil {
		return checkOut{err: fmt.Errorf("%s %q: %w", kind, name, err)}
	}
	if l, isListener := m.(*listener.Listener); isListener {
		refs = append(refs, routeClusters(l, r.packed)...) // a router's HTTP routes (router.go)
	}
	r.trust.put(m, refs)
	return checkOut{refs: refs}
}

// checkChunk is how many messages a worker of checkAll takes at a time: neighbours (the
// IPv4 and IPv6 listeners of one outbound, sorted side by side) mostly stay together, so
// their shared packed config is unpacked once.
const checkChunk = 256

// checkAll checks every message on every core (the proto checks are independent; the
// cross-references are checked afterwards, in order). Results are per kind, in order.
func (r *Resources) checkAll() (ls, cs, es, ss []checkOut) {
	nl, nc, ne := len(r.Listeners), len(r.Clusters), len(r.Endpoints)
	total := nl + nc + ne + len(r.Secrets)
	out := make([]checkOut, total)
	one := func(i int, done map[*anypb.Any]proto.Message) checkOut {
		switch {
		case i < nl:
			return r.checkOne("listener", r.Listeners[i].Name, r.Listeners[i], done)
		case i < nl+nc:
			c := r.Clusters[i-nl]
			return r.checkOne("cluster", c.Name, c, done)
		case i < nl+nc+ne:
			e := r.Endpoints[i-nl-nc]
			return r.checkOne("cluster load assignment", e.ClusterName, e, done)
		}
		s := r.Secrets[i-nl-nc-ne]
		return r.checkOne("secret", s.Name, s, done)
	}
	inChunks(total, checkChunk, func() func(int) {
		done := map[*anypb.Any]proto.Message{} // per worker
		return func(i int) { out[i] = one(i, done) }
	})
	return out[:nl], out[nl : nl+nc], out[nl+nc : nl+nc+ne], out[nl+nc+ne:]
}

// validated returns the result of the last Validate, running it if it never ran.
func (r *Resources) validated() error {
	if c := r.checked.Load(); c != nil {
		return c.err
	}
	return r.Validate()
}

func (r *Resources) validate() error {
	if r.delta != nil {
		if err := r.validateDelta(); err == nil {
			return nil
		}
		// Report from a full pass: its messages name every problem.
	}
	// The proto checks run on every core while this goroutine indexes the names; when both
	// find nothing wrong (the usual case) that is the whole validation. Otherwise the full
	// pass below reports every problem, in order.
	var lout, cout, eout, sout []checkOut
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		lout, cout, eout, sout = r.checkAll()
	}()
	idx, clean := r.indexNames()
	<-checked
	if clean && r.linkRefs(idx, lout, cout, eout, sout) {
		r.idx.Store(idx)
		return nil
	}
	return r.validateReport(lout, cout, eout, sout)
}

// boundAddress is the "address:port" a listener binds; false when it binds nothing (a
// virtual listener, or no socket address).
func boundAddress(l *listener.Listener) (string, bool) {
	if l.BindToPort != nil && !l.BindToPort.Value {
		return "", false
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return "", false
	}
	return sa.GetAddress() + ":" + strconv.FormatUint(uint64(sa.GetPortValue()), 10), true
}

// indexNames builds the cross-reference index of names and bound addresses; false at the
// first duplicate, unbacked assignment or EDS cluster without one (validateReport says what).
func (r *Resources) indexNames() (*xrefIndex, bool) {
	idx := newXrefIndex(len(r.Listeners), len(r.Clusters))
	bound := map[string]string{}
	for _, l := range r.Listeners {
		if _, dup := idx.lrefs[l.Name]; dup {
			return nil, false
		}
		idx.lrefs[l.Name] = nil // filled by linkRefs
		if key, ok := boundAddress(l); ok {
			if _, dup := bound[key]; dup {
				return nil, false
			}
			bound[key] = l.Name
			idx.boundBy[l.Name] = key
		}
	}
	for _, c := range r.Clusters {
		if _, dup := idx.clusters[c.Name]; dup {
			return nil, false
		}
		idx.clusters[c.Name] = c.GetType() == cluster.Cluster_EDS
	}
	for _, e := range r.Endpoints {
		if idx.cla[e.ClusterName] || !idx.clusters[e.ClusterName] {
			return nil, false
		}
		idx.cla[e.ClusterName] = true
	}
	for name, eds := range idx.clusters {
		if eds && !idx.cla[name] {
			return nil, false
		}
	}
	idx.bound = bound
	return idx, true
}

// linkRefs completes idx with the clusters each listener names; false when a check failed
// or a listener names a cluster that does not exist.
func (r *Resources) linkRefs(idx *xrefIndex, outs ...[]checkOut) bool {
	for _, out := range outs {
		for _, o := range out {
			if o.err != nil {
				return false
			}
		}
	}
	for i, l := range r.Listeners {
		refs := outs[0][i].refs
		idx.lrefs[l.Name] = refs
		for _, c := range refs {
			if _, ok := idx.clusters[c]; !ok {
				return false
			}
			idx.refCount[c]++
		}
	}
	return true
}

// validateReport is the full pass: every problem, in the order of the resources.
func (r *Resources) validateReport(lout, cout, eout, sout []checkOut) error {
	var errs []error
	idx := newXrefIndex(len(r.Listeners), len(r.Clusters))
	take := func(o checkOut) []string {
		if o.err != nil {
			errs = append(errs, o.err)
		}
		return o.refs
	}
	seenL := make(map[string]bool, len(r.Listeners))
	seenC := make(map[string]bool, len(r.Clusters))
	seenE := make(map[string]bool, len(r.Endpoints))
	bound := map[string]string{}
	for i, l := range r.Listeners {
		if seenL[l.Name] {
			errs = append(errs, fmt.Errorf("listener %q: defined twice", l.Name))
		}
		seenL[l.Name] = true
		name := l.Name
		lrefs := take(lout[i])
		idx.lrefs[name] = lrefs
		for _, c := range lrefs {
			idx.refCount[c]++
		}
		if key, ok := boundAddress(l); ok {
			if other, dup := bound[key]; dup {
				errs = append(errs, fmt.Errorf("listener %q: binds %s like listener %q", name, key, other))
			}
			bound[key] = name
			idx.boundBy[name] = key
		}
	}
	eds := make(map[string]bool, len(r.Clusters))
	for i, c := range r.Clusters {
		if seenC[c.Name] {
			errs = append(errs, fmt.Errorf("cluster %q: defined twice", c.Name))
		}
		seenC[c.Name] = true
		if c.GetType() == cluster.Cluster_EDS {
			eds[c.Name] = true
		}
		idx.clusters[c.Name] = c.GetType() == cluster.Cluster_EDS
		take(cout[i])
	}
	for i, e := range r.Endpoints {
		if seenE[e.ClusterName] {
			errs = append(errs, fmt.Errorf("cluster load assignment %q: defined twice", e.ClusterName))
		}
		seenE[e.ClusterName] = true
		if !eds[e.ClusterName] {
			errs = append(errs, fmt.Errorf("cluster load assignment %q: no EDS cluster of that name", e.ClusterName))
		}
		idx.cla[e.ClusterName] = true
		take(eout[i])
	}
	for i := range r.Secrets {
		take(sout[i])
	}
	for name := range eds {
		if !seenE[name] {
			errs = append(errs, fmt.Errorf("cluster %q: EDS cluster without a cluster load assignment", name))
		}
	}
	for _, c := range sortedKeys(idx.refCount) {
		if !seenC[c] {
			errs = append(errs, fmt.Errorf("listener %q: tcp_proxy names cluster %q, which does not exist", idx.firstUser(c), c))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	idx.bound = bound
	r.idx.Store(idx)
	return nil
}

// validateResource is validateDeep with a fast path for the shapes Generate produces:
// listeners and clusters have their packed configs in known places, so no reflection walk.
// packed gives the messages of the Anys the generation packed (nil: unpack every Any).
func validateResource(m proto.Message, done, packed map[*anypb.Any]proto.Message, onTCP func(*tcpproxy.TcpProxy)) error {
	var buf [4]*anypb.Any
	anys := buf[:0]
	switch r := m.(type) {
	case *listener.Listener:
		if len(r.GetListenerFilters())+len(r.GetFilterChains()) > 0 && r.GetDefaultFilterChain() == nil && r.GetUdpListenerConfig() == nil &&
			len(r.GetAccessLog()) == 0 && r.GetInternalListener() == nil {
			for _, lf := range r.ListenerFilters {
				anys = append(anys, lf.GetTypedConfig())
			}
			for _, fc := range r.FilterChains {
				if fc.GetTransportSocket() != nil {
					anys = append(anys, fc.GetTransportSocket().GetTypedConfig())
				}
				for _, f := range fc.Filters {
					anys = append(anys, f.GetTypedConfig())
				}
			}
		} else {
			return validateDeep(m, onTCP)
		}
	case *cluster.Cluster:
		if len(r.GetTypedExtensionProtocolOptions()) == 0 && r.GetClusterType() == nil && r.GetLoadBalancingPolicy() == nil &&
			len(r.GetTransportSocketMatches()) == 0 && r.GetUpstreamConfig() == nil && len(r.GetFilters()) == 0 {
			if ts := r.GetTransportSocket(); ts != nil {
				anys = append(anys, ts.GetTypedConfig())
			}
		} else {
			return validateDeep(m, onTCP)
		}
	case *endpoint.ClusterLoadAssignment:
		// No packed configs in what Generate puts there; metadata would be walked below.
		if hasMetadata(r) {
			return validateDeep(m, onTCP)
		}
	default:
		return validateDeep(m, onTCP)
	}
	if err := m.(validator).ValidateAll(); err != nil {
		return err
	}
	for _, a := range anys {
		if a == nil {
			continue
		}
		inner, seen := done[a]
		if !seen {
			var err error
			if src, ok := packed[a]; ok {
				inner = src
			} else if inner, err = a.UnmarshalNew(); err != nil {
				return fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err)
			}
			if err := validateLeaf(inner); err != nil {
				return fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err)
			}
			done[a] = inner
		}
		if tp, ok := inner.(*tcpproxy.TcpProxy); ok && onTCP != nil {
			onTCP(tp)
		}
	}
	return nil
}

// validateLeaf validates an unpacked config; a tcp_proxy without the parts that can hold
// packed configs (access logs, on-demand, tunneling) needs no reflection walk.
func validateLeaf(m proto.Message) error {
	if tp, ok := m.(*tcpproxy.TcpProxy); ok && len(tp.AccessLog) == 0 && tp.OnDemand == nil && tp.TunnelingConfig == nil {
		return tp.ValidateAll()
	}
	return validateDeep(m, nil)
}

func hasMetadata(c *endpoint.ClusterLoadAssignment) bool {
	if c.GetPolicy() != nil || len(c.GetNamedEndpoints()) > 0 {
		return true
	}
	for _, l := range c.GetEndpoints() {
		if l.GetMetadata() != nil || l.GetLbConfig() != nil {
			return true
		}
		for _, e := range l.GetLbEndpoints() {
			if e.GetMetadata() != nil || e.GetEndpoint().GetHealthCheckConfig() != nil {
				return true
			}
		}
	}
	return false
}

// validateDeep runs ValidateAll on m and, recursively, on every message packed in an Any
// inside it. onTCP, if set, sees every tcp_proxy config found.
func validateDeep(m proto.Message, onTCP func(*tcpproxy.TcpProxy)) error {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	return walkAnys(m.ProtoReflect(), func(a *anypb.Any) error {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err)
		}
		if tp, ok := inner.(*tcpproxy.TcpProxy); ok && onTCP != nil {
			onTCP(tp)
		}
		if err := validateDeep(inner, onTCP); err != nil {
			return fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err)
		}
		return nil
	})
}

var anyName = (&anypb.Any{}).ProtoReflect().Descriptor().FullName()

// walkAnys calls fn for every Any reachable from m (not inside another Any).
func walkAnys(m protoreflect.Message, fn func(*anypb.Any) error) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsMap() {
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					err = visit(mv.Message(), fn)
					return err == nil
				})
			}
			return err == nil
		}
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = visit(l.Get(i).Message(), fn)
			}
			return err == nil
		}
		err = visit(v.Message(), fn)
		return err == nil
	})
	return err
}

func visit(m protoreflect.Message, fn func(*anypb.Any) error) error {
	if m.Descriptor().FullName() == anyName {
		a, ok := m.Interface().(*anypb.Any)
		if !ok {
			a = &anypb.Any{}
			proto.Merge(a, m.Interface())
		}
		return fn(a)
	}
	return walkAnys(m, fn)
}

// ValidateMessage runs Envoy's proto validation on m and on every typed_config packed inside
// it (ValidateAll alone stops at Any). Used for the bootstrap too.
func ValidateMessage(m proto.Message) error { return validateDeep(m, nil) }
