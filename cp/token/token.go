// Package token owns dataplane tokens: "kdp1.<payload>.<mac>", the payload the base64url JSON
// of the dataplane's name, mesh and expiry, the mac HMAC-SHA256 of "kdp1.<payload>" under the
// control plane's key (32 random bytes, hex in the key file). The control plane issues them
// (`kuma-cp token`) and checks them on every stream: a token is good for one dataplane name
// in one mesh until it expires. Rotating the key revokes every token at once.
package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

const prefix = "kdp1."

// Identity is whom a token is for, and until when.
type Identity struct {
	Name string `json:"name"`
	Mesh string `json:"mesh"`
	// Expires is when the token stops being accepted; zero: never (tokens issued with
	// --valid-for 0, and those of earlier versions).
	Expires int64 `json:"exp,omitempty"`
}

// Errors of Verify.
var (
	ErrSignature = errors.New("the token was not signed by this control plane's key")
	ErrExpired   = errors.New("the token has expired: issue a new one (kuma-cp token --valid-for)")
)

// NewKey is a fresh random key.
func NewKey() ([]byte, error) {
	k := make([]byte, 32)
	_, err := rand.Read(k)
	return k, err
}

// ReadKey reads a key file (hex).
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token key (--token-key-file %q): %w", path, err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) < 16 {
		return nil, fmt.Errorf("token key (--token-key-file %q): want at least 16 bytes in hex (kuma-cp certs writes one)", path)
	}
	return k, nil
}

// Issue signs a token for id.
func Issue(key []byte, id Identity) string {
	payload, _ := json.Marshal(id)
	head := prefix + base64.RawURLEncoding.EncodeToString(payload)
	return head + "." + base64.RawURLEncoding.EncodeToString(mac(key, head))
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// Verify checks a token at time now and returns whom it is for.
func Verify(key []byte, tok string, now time.Time) (Identity, error) {
	if !strings.HasPrefix(tok, prefix) {
		return Identity{}, errors.New("malformed token: want kdp1.<payload>.<signature> (issued by kuma-cp token)")
	}
	i := strings.LastIndexByte(tok, '.')
	head, sig := tok[:i], tok[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(head) <= len(prefix) {
		return Identity{}, errors.New("malformed token: bad signature encoding")
	}
	if !hmac.Equal(got, mac(key, head)) {
		return Identity{}, ErrSignature
	}
	payload, err := base64.RawURLEncoding.DecodeString(head[len(prefix):])
	var id Identity
	if err == nil {
		err = json.Unmarshal(payload, &id)
	}
	if err != nil || id.Name == "" || id.Mesh == "" {
		return Identity{}, errors.New("malformed token: payload needs name and mesh")
	}
	if id.Expires != 0 && now.Unix() >= id.Expires {
		return id, fmt.Errorf("%w (expired %s)", ErrExpired, time.Unix(id.Expires, 0).UTC().Format(time.RFC3339))
	}
	return id, nil
}

// FromBearer is the credentials of an Authorization header (or gRPC metadata) value of the
// Bearer scheme: the scheme in any case (RFC 9110 11.1: case-insensitive), then one or more
// spaces and the token. A value of another scheme, or a bare token, gives ok false.
func FromBearer(value string) (tok string, ok bool) {
	scheme, rest, found := strings.Cut(value, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(rest, " ")
	return tok, tok != ""
}
