package mesh

import "encoding/json"

// EncodeJSON is a resource's document as the control plane stores what it writes itself (a
// route's or a router's status): JSON of the universal form, with its type, and without a
// creation time when it has none (the store keeps its own).
func EncodeJSON(r Resource) []byte {
	b, _ := json.Marshal(r)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	if m := r.GetMeta(); m.CreationTime().IsZero() {
		delete(fields, "creationTime")
	}
	fields["type"], _ = json.Marshal(r.Kind())
	out, _ := json.Marshal(fields)
	return out
}
