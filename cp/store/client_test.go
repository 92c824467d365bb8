package store

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// Members counts a 3-member etcd's members and those that answer; a killed member is named
// among those that do not, with its client URL.
func TestMembersNamesTheUnreachable(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cl := testClient(t, c.Endpoints(), slog.New(slog.DiscardHandler))
	m, err := cl.Members(5*time.Second, 2*time.Second)
	if err != nil || m.Total != 3 || m.Reachable != 3 || len(m.Down) != 0 {
		t.Fatalf("all up: %+v, %v", m, err)
	}
	c.Kill(2)
	m, err = cl.Members(5*time.Second, 500*time.Millisecond)
	if err != nil || m.Total != 3 || m.Reachable != 2 || len(m.Down) != 1 {
		t.Fatalf("one killed: %+v, %v", m, err)
	}
	if want := c.Members[2].Name + " (" + c.Endpoints()[2] + ")"; !strings.Contains(m.Down[0], want) {
		t.Errorf("down: %q, want %q", m.Down[0], want)
	}
}
