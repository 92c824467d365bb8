package token

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestIssueVerifyExpire(t *testing.T) {
	key, _ := NewKey()
	now := time.Now()
	tok := Issue(key, Identity{Name: "web-1", Mesh: "default", Expires: now.Add(time.Hour).Unix()})
	if id, err := Verify(key, tok, now); err != nil || id.Name != "web-1" || id.Mesh != "default" {
		t.Fatalf("fresh token: %+v %v", id, err)
	}
	_, err := Verify(key, tok, now.Add(2*time.Hour))
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
	other, _ := NewKey()
	if _, err := Verify(other, tok, now); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key: %v", err)
	}
	forever := Issue(key, Identity{Name: "web-1", Mesh: "default"})
	if _, err := Verify(key, forever, now.Add(100*365*24*time.Hour)); err != nil {
		t.Fatalf("a token without expiry: %v", err)
	}
	if _, err := Verify(key, strings.Replace(tok, "kdp1.", "kdp1.x", 1), now); err == nil {
		t.Fatal("a tampered token was accepted")
	}
}

func TestForgedAndMalformed(t *testing.T) {
	key, _ := NewKey()
	now := time.Now()
	good := Issue(key, Identity{Name: "web-1", Mesh: "default"})
	// A payload changed under the same signature (another dataplane) is refused.
	forged := Issue(key, Identity{Name: "db-1", Mesh: "default"})
	forged = forged[:strings.LastIndexByte(forged, '.')] + good[strings.LastIndexByte(good, '.'):]
	if _, err := Verify(key, forged, now); !errors.Is(err, ErrSignature) {
		t.Errorf("forged payload: %v", err)
	}
	for _, bad := range []string{"", "Bearer x", "kdp1.", "kdp1.e30.!!", Issue(key, Identity{Name: "x"})} {
		if _, err := Verify(key, bad, now); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestReadKeyNamesTheFlag(t *testing.T) {
	f := t.TempDir() + "/key"
	if err := os.WriteFile(f, []byte("not hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadKey(f)
	if err == nil || !strings.Contains(err.Error(), "--token-key-file") || !strings.Contains(err.Error(), f) {
		t.Fatalf("want an error naming the flag and file, got %v", err)
	}
}

// The Bearer scheme is case-insensitive and the token follows one or more spaces; a bare
// token, another scheme or an empty token is no Bearer credential.
func TestFromBearer(t *testing.T) {
	for value, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc": "abc", "bEaReR abc": "abc"} {
		if got, ok := FromBearer(value); !ok || got != want {
			t.Errorf("%q: %q %v, want %q", value, got, ok, want)
		}
	}
	for _, value := range []string{"abc", "", "Bearer", "Bearer ", "Bearerabc", "Basic abc", "Token abc"} {
		if got, ok := FromBearer(value); ok {
			t.Errorf("%q accepted as %q", value, got)
		}
	}
}
