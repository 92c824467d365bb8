package mesh

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MeshService is Kuma 2.x's service resource: the dataplanes it selects
// (spec.selector.dataplaneTags, dataplaneRef or dataplaneLabels) and the ports it exposes.
// Its names come from the HostnameGenerators that select it, its VIP from the dataplane's
// MeshService pool (vipalloc); its status is computed on the dataplane, the written one is
// the control plane's and is ignored.
type MeshService struct {
	Meta
	Spec MeshServiceSpec `json:"spec"`
}

// MeshServiceSpec is MeshService.spec.
type MeshServiceSpec struct {
	Selector MeshServiceSelector `json:"selector"`
	Ports    []MeshServicePort   `json:"ports"`
	// Identities and State are Kuma's, kept as written (mTLS identities are the control
	// plane's; the state is computed here from the selected inbounds).
	Identities json.RawMessage `json:"identities,omitempty"`
	State      string          `json:"state,omitempty"`
}

// MeshServiceSelector selects the dataplanes of a MeshService: one of dataplaneTags (the
// tags of an inbound), dataplaneRef (one dataplane by name) or dataplaneLabels.
type MeshServiceSelector struct {
	DataplaneTags   Tags              `json:"dataplaneTags,omitempty"`
	DataplaneRef    *DataplaneRef     `json:"dataplaneRef,omitempty"`
	DataplaneLabels *LabelSelectorRef `json:"dataplaneLabels,omitempty"`
}

// DataplaneRef names one dataplane.
type DataplaneRef struct {
	Name string `json:"name"`
}

// LabelSelectorRef is Kuma's `matchLabels` selector.
type LabelSelectorRef struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// MeshServicePort is one spec.ports element. TargetPort is the selected inbounds' port (a
// number) or an inbound's name (text); Kuma also writes `{value: N}` and `{name: X}`, read
// as those. Nil: the port itself.
type MeshServicePort struct {
	Name        string `json:"name,omitempty"`
	Port        uint32 `json:"port"`
	TargetPort  any    `json:"targetPort,omitempty"`
	AppProtocol string `json:"appProtocol,omitempty"`
}

// meshServiceProtocols are Kuma's appProtocol values (kafka is TCP here, as in Kuma's
// proxying).
var meshServiceProtocols = []string{"tcp", "http", "http2", "grpc", "kafka"}

// Target is where the port's traffic goes on a selected dataplane: an inbound port (number
// > 0) or an inbound name.
func (p *MeshServicePort) Target() (port uint32, name string) {
	switch t := p.TargetPort.(type) {
	case nil:
		return p.Port, ""
	case uint32:
		return t, ""
	case string:
		return 0, t
	}
	return 0, ""
}

// Protocol is the port's appProtocol, tcp when not given.
func (p *MeshServicePort) Protocol() string {
	if p.AppProtocol == "" {
		return "tcp"
	}
	return p.AppProtocol
}

// PortName is how routes' sectionName and backendRefs name the port: its name, else its
// number.
func (p *MeshServicePort) PortName() string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.FormatUint(uint64(p.Port), 10)
}

// FindPort is the port named or numbered by section ("" when there is exactly one port:
// that one), nil when there is none.
func (ms *MeshService) FindPort(section string) *MeshServicePort {
	if section == "" && len(ms.Spec.Ports) == 1 {
		return &ms.Spec.Ports[0]
	}
	for i := range ms.Spec.Ports {
		p := &ms.Spec.Ports[i]
		if p.Name == section || strconv.FormatUint(uint64(p.Port), 10) == section {
			return p
		}
	}
	return nil
}

// SelectsInbound reports whether the MeshService's selector picks inbound in of dp.
func (ms *MeshService) SelectsInbound(dp *Dataplane, in *Inbound) bool {
	sel := ms.Spec.Selector
	switch {
	case len(sel.DataplaneTags) > 0:
		return sel.DataplaneTags.Matches(in.Tags)
	case sel.DataplaneRef != nil:
		return sel.DataplaneRef.Name == dp.Name
	case sel.DataplaneLabels != nil:
		return LabelsMatch(sel.DataplaneLabels.MatchLabels, dp.Labels())
	}
	return false
}

// Endpoints calls add with every inbound of dps that port p of the MeshService sends to
// (SendsTo).
func (ms *MeshService) Endpoints(dps []*Dataplane, p *MeshServicePort, add func(dp *Dataplane, in *Inbound)) {
	for _, dp := range dps {
		for i := range dp.Networking.Inbound {
			if in := &dp.Networking.Inbound[i]; ms.SendsTo(p, dp, in) {
				add(dp, in)
			}
		}
	}
}

// SendsTo reports whether port p of the MeshService sends to inbound in of dp: a serving
// inbound the selector picks whose port (or name) is the port's target.
func (ms *MeshService) SendsTo(p *MeshServicePort, dp *Dataplane, in *Inbound) bool {
	if !in.Serving() || !ms.SelectsInbound(dp, in) {
		return false
	}
	port, name := p.Target()
	return port != 0 && (in.Port == port || in.ServicePort == port) || name != "" && in.InboundExtra != nil && in.InboundExtra.Name == name
}

// LabelsMatch reports whether every entry of sel is in labels (an empty sel matches all):
// Kuma's matchLabels and a targetRef's labels.
func LabelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// normalizeTargetPorts reads Kuma's forms of targetPort into a uint32 port or a name.
func (d *decoder) normalizeTargetPorts(ms *MeshService) {
	for i := range ms.Spec.Ports {
		p := &ms.Spec.Ports[i]
		path := indexPath("spec.ports", i) + ".targetPort"
		p.TargetPort = d.targetPort(p.TargetPort, path)
	}
}

func (d *decoder) targetPort(n any, path string) any {
	switch t := n.(type) {
	case nil:
		return nil
	case json.Number:
		v, err := strconv.ParseUint(t.String(), 10, 32)
		if err != nil || v == 0 || v > 65535 {
			d.errorf(path, t.String(), "port must be 1-65535")
			return nil
		}
		return uint32(v)
	case float64:
		return d.targetPort(json.Number(strconv.FormatFloat(t, 'f', -1, 64)), path)
	case uint32:
		return t
	case string:
		if v, err := strconv.ParseUint(t, 10, 32); err == nil {
			return d.targetPort(json.Number(strconv.FormatUint(v, 10)), path)
		}
		if t == "" {
			d.errorf(path, t, "an inbound port or name, not empty")
			return nil
		}
		return d.strs.share(t)
	case map[string]any:
		if len(t) != 1 {
			d.errorf(path, "", "give value (a port) or name (an inbound's name)")
			return nil
		}
		if v, ok := t["value"]; ok {
			return d.targetPort(v, path+".value")
		}
		if v, ok := t["name"]; ok {
			s, isStr := v.(string)
			if !isStr || s == "" {
				d.errorf(path+".name", scalarText(v), "an inbound's name")
				return nil
			}
			return d.strs.share(s)
		}
		d.unknown(path+"."+sortedKeys(t)[0], sortedKeys(t)[0], []string{"name", "value"})
		return nil
	}
	d.errorf(path, scalarText(n), "expected a port or an inbound's name, got %s", typeName(n))
	return nil
}

func (v *validator) meshService(ms *MeshService) {
	sel := ms.Spec.Selector
	given := 0
	if len(sel.DataplaneTags) > 0 {
		given++
		v.tags("spec.selector.dataplaneTags", sel.DataplaneTags, false, false)
	}
	if sel.DataplaneRef != nil {
		given++
		if sel.DataplaneRef.Name == "" {
			v.errorf("spec.selector.dataplaneRef.name", "", "required")
		}
	}
	if sel.DataplaneLabels != nil {
		given++
		if len(sel.DataplaneLabels.MatchLabels) == 0 {
			v.errorf("spec.selector.dataplaneLabels.matchLabels", "", "required")
		}
	}
	switch given {
	case 0:
		v.errorf("spec.selector", "", "required: dataplaneTags, dataplaneRef or dataplaneLabels")
	case 1:
	default:
		v.errorf("spec.selector", "", "give one of dataplaneTags, dataplaneRef or dataplaneLabels")
	}
	if len(ms.Spec.Ports) == 0 {
		v.errorf("spec.ports", "", "at least one port is required")
	}
	seen := map[string]int{}
	for i := range ms.Spec.Ports {
		p := &ms.Spec.Ports[i]
		path := indexPath("spec.ports", i)
		v.port(path+".port", p.Port, true)
		if p.AppProtocol != "" && !oneOf(p.AppProtocol, meshServiceProtocols) {
			v.errorf(path+".appProtocol", p.AppProtocol, "must be one of %s", strings.Join(meshServiceProtocols, ", "))
		}
		if p.Name != "" {
			if err := checkName(p.Name); err != nil {
				v.errorf(path+".name", p.Name, "%v", err)
			}
		}
		for _, key := range []string{p.PortName(), "#" + strconv.FormatUint(uint64(p.Port), 10)} {
			if j, dup := seen[key]; dup && p.Port != 0 {
				v.errorf(path, p.PortName(), "the same port or name as spec.ports[%d]", j)
				break
			}
			seen[key] = i
		}
	}
}

// String names a MeshService port for messages: "backend:http" (or "backend:8080").
func (ms *MeshService) String(p *MeshServicePort) string {
	return fmt.Sprintf("%s:%s", ms.Name, p.PortName())
}

// LabelsText is labels (or a label selector) as a user writes them: k=v sorted by key,
// comma-separated; "" for none (the caller says what none means: "<all>", "<none>").
func LabelsText(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
