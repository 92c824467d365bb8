package jsontext

import (
	"encoding/json"
	"testing"
)

func TestAppendStringIsEncodingJSONs(t *testing.T) {
	for _, s := range []string{"", "web.mesh", `q"uote`, "back\\slash", "<&>", "line\nbreak", "\x01", "ü", "a\u2028b"} {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	}
}
