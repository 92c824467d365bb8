package errtext

import "testing"

func TestSuggest(t *testing.T) {
	known := []string{"conf", "destinations", "host", "port", "selectors", "sources"}
	for key, want := range map[string]string{"hosts": "host", "selector": "selectors", "Port": "port",
		"destination": "destinations", "x": "", "zzzzzzzz": "", "": ""} {
		if got := Suggest(key, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", key, got, want)
		}
	}
	if got := Suggest("port", nil); got != "" {
		t.Errorf("Suggest among no names = %q", got)
	}
}
