package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// Envelopes as written are read directly, to what encoding/json reads of them; any other
// form (fields reordered, escapes, other fields, not JSON) is read by encoding/json, errors
// included.
func TestReadEnvelopeAsEncodingJSON(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	var written [][]byte
	for _, doc := range [][]byte{[]byte("type: Dataplane\nname: a\n"), all, {}, []byte("x"), []byte("xy")} {
		for _, at := range []time.Time{time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC), time.Date(2026, 11, 28, 8, 0, 0, 123456789, time.FixedZone("", -7*3600)), {}} {
			e := newEnvelope(doc, at)
			e.Modified = at.Add(time.Second)
			for _, write := range []string{e.Write, ""} {
				e.Write = write
				b, _ := json.Marshal(e)
				written = append(written, b)
			}
		}
	}
	for _, b := range written {
		if _, ok := readWritten(b); !ok {
			t.Errorf("not read directly: %s", b)
		}
	}
	others := [][]byte{
		[]byte(`{"created":"2026-11-28T08:00:00Z","doc":"eA==","modified":"2026-11-28T08:00:00Z"}`),
		[]byte(`{"doc":"eA\u003d\u003d","created":"2026-11-28T08:00:00Z","modified":"2026-11-28T08:00:00Z"}`),
		[]byte(`{"doc":"eA==","created":"2026-11-28T08:00:00Z","modified":"2026-11-28T08:00:00Z","other":1}`),
		[]byte(`{"doc":"eA==","created":"2026-11-28T08:00:00Z","modified":"2026-11-28T08:00:00Z","write":"a\"b"}`),
		[]byte(`{"doc":"not base64!","created":"2026-11-28T08:00:00Z","modified":"2026-11-28T08:00:00Z"}`),
		[]byte(`{"doc":"eA==","created":"yesterday","modified":"2026-11-28T08:00:00Z"}`),
		[]byte(`{"doc":"eA==","created":"2026-11-28T08:00:00Z","modified":"2026-11-28T08:00:00Z"} `),
		[]byte(`not an envelope`), []byte(`{}`), nil,
	}
	for _, b := range append(written, others...) {
		got, gotErr := readEnvelope(b)
		var want envelope
		wantErr := json.Unmarshal(b, &want)
		if (gotErr != nil) != (wantErr != nil) {
			t.Errorf("%s: error %v, encoding/json's %v", b, gotErr, wantErr)
			continue
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\nread      %+v\nwant (encoding/json) %+v", b, got, want)
		}
	}
}

// BenchmarkReadEnvelope: one stored Dataplane's envelope read, beside encoding/json.
//
//	go test ./cp/store -run '^$' -bench ReadEnvelope -benchmem
func BenchmarkReadEnvelope(b *testing.B) {
	val, _ := json.Marshal(newEnvelope([]byte("type: Dataplane\nmesh: default\nname: dp-1\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-1\n      kuma.io/zone: zone-1\n      version: v1\n"), time.Now()))
	b.Run("Direct", func(b *testing.B) {
		for range b.N {
			if _, err := readEnvelope(val); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodingJSON", func(b *testing.B) {
		for range b.N {
			var e envelope
			if err := json.Unmarshal(val, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
