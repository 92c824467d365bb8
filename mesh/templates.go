package mesh

import "github.com/kumadp/kuma-dp/hostname"

// NamespaceLabel is the Kubernetes namespace of a resource synced from Kubernetes: Kuma's
// {{ .Namespace }} of a HostnameGenerator.
const NamespaceLabel = "k8s.kuma.io/namespace"

// Templates is the conf as package hostname compiles it (hostname.CompileVirtualOutbound).
func (c VirtualOutboundConf) Templates() hostname.VirtualOutboundConf {
	t := hostname.VirtualOutboundConf{Host: c.Host, Port: c.Port, Tags: c.Tags}
	for _, p := range c.Parameters {
		t.Parameters = append(t.Parameters, hostname.Parameter(p))
	}
	return t
}
