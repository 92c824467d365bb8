// Package jsontext writes JSON text by hand where encoding/json's reflection is too slow
// for the size of the data (every hostname of a state file, every tag of a mesh).
package jsontext

import "encoding/json"

// AppendString appends s as a JSON string, escaped exactly as encoding/json escapes it:
// as is when it needs no escaping (hostnames and tags almost never do), else through
// encoding/json.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
