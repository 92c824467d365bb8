package fanout

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kumadp/kuma-dp/cp/token"
)

// mdStream is a server stream whose context carries the metadata a client sent.
type mdStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s mdStream) Context() context.Context { return s.ctx }

// An agent's token is a Bearer credential: the scheme in any case is accepted, a bare token
// or another scheme is refused as no token.
func TestStreamTokenBearerScheme(t *testing.T) {
	key, err := token.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	cp := New(key, slog.New(slog.DiscardHandler))
	tok := token.Issue(key, token.Identity{Name: "web-1", Mesh: "default"})
	open := func(auth string) (string, error) {
		var who string
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", auth))
		err := cp.authStream(nil, mdStream{ctx: ctx}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
			who = ss.Context().Value(ctxKey{}).(token.Identity).Name
			return nil
		})
		return who, err
	}
	for _, auth := range []string{"Bearer " + tok, "bearer " + tok, "BEARER  " + tok} {
		if who, err := open(auth); err != nil || who != "web-1" {
			t.Errorf("%q: %q %v, want web-1 served", auth[:8], who, err)
		}
	}
	for _, auth := range []string{tok, "Basic " + tok, "Bearer"} {
		if _, err := open(auth); err == nil || !strings.Contains(err.Error(), "no dataplane token") {
			t.Errorf("%.8q: %v, want refused as no token", auth, err)
		}
	}
}
