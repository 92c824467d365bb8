package mesh

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The reflection decoder's scalar and list coercions, one value at a time: what YAML users
// write in place of the type expected, accepted or refused with the path and a reason.
func TestDecodeValueKinds(t *testing.T) {
	type target struct {
		B  bool
		I  int64
		U  uint32
		S  string
		L  []string
		P  *bool
		AI any
	}
	cases := []struct {
		field string
		in    any
		want  any    // the field's value after decoding (when no error)
		err   string // in the error message
	}{
		{"B", true, true, ""},
		{"B", "false", false, ""},
		{"B", "maybe", nil, "expected true or false"},
		{"B", json.Number("1"), nil, "expected true or false, got"},
		{"I", json.Number("-3"), int64(-3), ""},
		{"I", " 42 ", int64(42), ""},
		{"I", "4x", nil, "expected an integer"},
		{"I", true, nil, "expected a number, got"},
		{"U", json.Number("7"), uint32(7), ""},
		{"U", json.Number("-1"), nil, "expected a whole number 0-4294967295"},
		{"S", json.Number("2"), "2", ""},
		{"S", true, "true", ""},
		{"S", []any{"x"}, nil, "expected a string, got"},
		{"L", []any{"a", "b"}, []string{"a", "b"}, ""},
		{"L", "a", nil, "expected a list, got"},
		{"P", "true", true, ""},
		{"AI", map[string]any{"k": "v"}, map[string]any{"k": "v"}, ""},
	}
	for _, tc := range cases {
		var x target
		d := &decoder{source: NewSource("t.yaml", 0)}
		f := reflect.ValueOf(&x).Elem().FieldByName(tc.field)
		d.value(f, tc.in, "spec."+strings.ToLower(tc.field))
		if tc.err != "" {
			if len(d.errs) != 1 || !strings.Contains(d.errs[0].Error(), tc.err) || !strings.Contains(d.errs[0].Error(), "spec.") {
				t.Errorf("%s <- %#v: errors %v, want one with %q and the path", tc.field, tc.in, d.errs, tc.err)
			}
			continue
		}
		if len(d.errs) != 0 {
			t.Errorf("%s <- %#v: %v", tc.field, tc.in, d.errs)
			continue
		}
		got := f.Interface()
		if f.Kind() == reflect.Pointer {
			got = f.Elem().Interface()
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s <- %#v = %#v, want %#v", tc.field, tc.in, got, tc.want)
		}
	}
}
