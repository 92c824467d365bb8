package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	key, _ := newKey()
	other, _ := newKey()
	good := issueToken(key, identity{Name: "web-1", Mesh: "default"})
	id, err := verifyToken(key, good)
	if err != nil || id != (identity{Name: "web-1", Mesh: "default"}) {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	if _, err := verifyToken(other, good); !errors.Is(err, errTokenSignature) {
		t.Errorf("another key: %v", err)
	}
	// A payload changed under the same signature (another dataplane) is refused.
	forged := issueToken(key, identity{Name: "db-1", Mesh: "default"})
	forged = forged[:strings.LastIndexByte(forged, '.')] + good[strings.LastIndexByte(good, '.'):]
	if _, err := verifyToken(key, forged); !errors.Is(err, errTokenSignature) {
		t.Errorf("forged payload: %v", err)
	}
	for _, bad := range []string{"", "Bearer x", "kdp1.", "kdp1.e30.!!", issueToken(key, identity{Name: "x"})} {
		if _, err := verifyToken(key, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestReadKeyNamesTheFlag(t *testing.T) {
	f := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f, []byte("not hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := readKey(f)
	if err == nil || !strings.Contains(err.Error(), "--token-key-file") || !strings.Contains(err.Error(), f) {
		t.Fatalf("want an error naming the flag and file, got %v", err)
	}
}
