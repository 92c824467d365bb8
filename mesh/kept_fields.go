package mesh

// KeptFields are the fields of Kuma's universal Dataplane that d carries and the agent
// accepts and keeps but does not act on (docs/kuma-compatibility.md says why for each), by
// path; nil when none. The agent logs them at debug level, so a user who relies on one of
// them learns that it has no effect here.
func (d *Dataplane) KeptFields() []string {
	var out []string
	add := func(present bool, path string) {
		if present {
			out = append(out, path)
		}
	}
	if k := d.Kept(); k != nil {
		add(len(k.Metrics) > 0, "metrics")
		add(len(k.Probes) > 0, "probes")
	}
	n := &d.Networking
	if k := n.NetworkingExtra; k != nil {
		add(len(k.Gateway) > 0, "networking.gateway")
		add(len(k.Admin) > 0, "networking.admin")
	}
	if tp := n.TransparentProxying(); tp != nil {
		add(tp.RedirectPortInboundV6 != 0, "networking.transparentProxying.redirectPortInboundV6")
		add(len(tp.DirectAccessServices) > 0, "networking.transparentProxying.directAccessServices")
		add(len(tp.ReachableBackends) > 0, "networking.transparentProxying.reachableBackends")
	}
	probe := false
	for _, in := range n.Inbound {
		probe = probe || in.InboundExtra != nil && len(in.ServiceProbe) > 0
	}
	add(probe, "networking.inbound[].serviceProbe")
	return out
}
