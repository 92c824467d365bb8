package mesh

// SelectsMES reports whether a HostnameGenerator's targetRef picks a MeshExternalService of
// these labels: kind MeshExternalService (or empty) and every tag among its labels (empty
// tags select every MeshExternalService, like an empty label selector). why, when it does
// not, names the first label missing or different, or the other kind it selects.
func (ref TargetRef) SelectsMES(labels map[string]string) (ok bool, why string) {
	if ref.Kind != "" && ref.Kind != KindMeshExternalService {
		return false, "it selects " + ref.Kind + "s, not MeshExternalServices"
	}
	for _, tg := range ref.Tags {
		got, ok := labels[tg.Key]
		switch {
		case !ok:
			return false, "label " + tg.Key + " is missing (the generator selects " + tg.Key + "=" + tg.Value + ")"
		case tg.Value != Wildcard && tg.Value != got:
			return false, "label " + tg.Key + " is " + got + ", the generator selects " + tg.Value
		}
	}
	return true, ""
}
