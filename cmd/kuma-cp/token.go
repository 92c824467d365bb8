package main

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
)

// Dataplane tokens: "kdp1.<payload>.<mac>", the payload the base64url JSON of the
// dataplane's name and mesh, the mac HMAC-SHA256 of "kdp1.<payload>" under the control
// plane's key (32 random bytes, hex in the key file). The control plane issues them
// (`kuma-cp token`) and checks them on every stream; a token is good for one dataplane name
// in one mesh. No expiry: rotate the key to revoke every token at once.

const tokenPrefix = "kdp1."

type identity struct {
	Name string `json:"name"`
	Mesh string `json:"mesh"`
}

func newKey() ([]byte, error) {
	k := make([]byte, 32)
	_, err := rand.Read(k)
	return k, err
}

func readKey(path string) ([]byte, error) {
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

func issueToken(key []byte, id identity) string {
	payload, _ := json.Marshal(id)
	head := tokenPrefix + base64.RawURLEncoding.EncodeToString(payload)
	return head + "." + base64.RawURLEncoding.EncodeToString(mac(key, head))
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

var errTokenSignature = errors.New("the token was not signed by this control plane's key")

// verifyToken checks a token and returns whom it is for.
func verifyToken(key []byte, token string) (identity, error) {
	if !strings.HasPrefix(token, tokenPrefix) {
		return identity{}, errors.New("malformed token: want kdp1.<payload>.<signature> (issued by kuma-cp token)")
	}
	i := strings.LastIndexByte(token, '.')
	head, sig := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(head) <= len(tokenPrefix) {
		return identity{}, errors.New("malformed token: bad signature encoding")
	}
	if !hmac.Equal(got, mac(key, head)) {
		return identity{}, errTokenSignature
	}
	payload, err := base64.RawURLEncoding.DecodeString(head[len(tokenPrefix):])
	var id identity
	if err == nil {
		err = json.Unmarshal(payload, &id)
	}
	if err != nil || id.Name == "" || id.Mesh == "" {
		return identity{}, errors.New("malformed token: payload needs name and mesh")
	}
	return id, nil
}
