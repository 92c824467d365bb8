package cplink

import (
	"testing"
)

func TestRenderVars(t *testing.T) {
	vars := map[string]string{"name": "web-7", "address": "10.1.2.3"}
	tests := []struct {
		name, in, want, err string
	}{
		{"no placeholders", "name: web\n", "name: web\n", ""},
		{"both spacings", "name: {{ name }}\naddress: {{address}}\n", "name: web-7\naddress: 10.1.2.3\n", ""},
		{"missing", "name: {{ name }}\nzone: {{ zone }}\nzone2: {{ zone }}\n", "", `line 2: no value for {{ zone }} (give it with --dataplane-var zone=VALUE; given: ["address" "name"])`},
		// Go's template form was left in the file, and refused as a name with a '{' in it.
		{"go template form", "mesh: default\nname: {{ .name }}\n", "", `line 2: {{ .name }} is not a placeholder: write {{ name }} (a letter or _, then letters, digits, _ . or -)`},
		{"pipeline", "name: {{ name | upper }}\n", "", `line 1: {{ name | upper }} is not a placeholder: write {{ name }} (a letter or _, then letters, digits, _ . or -)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderVars([]byte(tt.in), vars)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

// A placeholder name is a letter or _, then letters, digits, _ . or -.
func TestValidVarName(t *testing.T) {
	for name, want := range map[string]bool{"address": true, "_x": true, "pod.ip-1": true, "a_b9": true,
		"": false, "1x": false, ".x": false, "-x": false, "a b": false, "é": false, "a/b": false, "x=y": false} {
		if got := ValidVarName(name); got != want {
			t.Errorf("ValidVarName(%q) = %v, want %v", name, got, want)
		}
	}
}
