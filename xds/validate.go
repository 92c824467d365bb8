package xds

import (
	"errors"
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
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
	var errs []error
	refs := map[string][]string{} // cluster -> listeners naming it
	check := func(kind, name string, m proto.Message, onTCP func(*tcpproxy.TcpProxy)) {
		if err := validateDeep(m, onTCP); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", kind, name, err))
		}
	}
	seen := map[string]bool{}
	bound := map[string]string{}
	for _, l := range r.Listeners {
		if seen["l/"+l.Name] {
			errs = append(errs, fmt.Errorf("listener %q: defined twice", l.Name))
		}
		seen["l/"+l.Name] = true
		name := l.Name
		check("listener", name, l, func(tp *tcpproxy.TcpProxy) {
			if c := tp.GetCluster(); c != "" {
				refs[c] = append(refs[c], name)
			}
			for _, w := range tp.GetWeightedClusters().GetClusters() {
				refs[w.Name] = append(refs[w.Name], name)
			}
		})
		if l.BindToPort == nil || l.BindToPort.Value {
			if sa := l.GetAddress().GetSocketAddress(); sa != nil {
				key := fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
				if other, dup := bound[key]; dup {
					errs = append(errs, fmt.Errorf("listener %q: binds %s like listener %q", name, key, other))
				}
				bound[key] = name
			}
		}
	}
	eds := map[string]bool{}
	for _, c := range r.Clusters {
		if seen["c/"+c.Name] {
			errs = append(errs, fmt.Errorf("cluster %q: defined twice", c.Name))
		}
		seen["c/"+c.Name] = true
		if c.GetType() == cluster.Cluster_EDS {
			eds[c.Name] = true
		}
		check("cluster", c.Name, c, nil)
	}
	for _, e := range r.Endpoints {
		if seen["e/"+e.ClusterName] {
			errs = append(errs, fmt.Errorf("cluster load assignment %q: defined twice", e.ClusterName))
		}
		seen["e/"+e.ClusterName] = true
		if !eds[e.ClusterName] {
			errs = append(errs, fmt.Errorf("cluster load assignment %q: no EDS cluster of that name", e.ClusterName))
		}
		check("cluster load assignment", e.ClusterName, e, nil)
	}
	for _, s := range r.Secrets {
		check("secret", s.Name, s, nil)
	}
	for name := range eds {
		if !seen["e/"+name] {
			errs = append(errs, fmt.Errorf("cluster %q: EDS cluster without a cluster load assignment", name))
		}
	}
	for _, c := range sortedKeys(refs) {
		if !seen["c/"+c] {
			errs = append(errs, fmt.Errorf("listener %q: tcp_proxy names cluster %q, which does not exist", refs[c][0], c))
		}
	}
	return errors.Join(errs...)
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
