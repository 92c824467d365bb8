package tproxy

import (
	"os/exec"
	"strings"
	"testing"
)

// A tool that inserts its rules at the top of the built-in chains after we did (Docker
// setting up its DNS again, Calico's Felix keeping its jumps first) puts them ahead of our
// jumps: an application's query to Docker's 127.0.0.11 then reaches Docker's resolver, not
// ours. Verify says so, and install puts our jumps back on top - it used to find our rules
// all there and change nothing.
func TestJumpsDisplacedByAForeignInsert(t *testing.T) {
	b, n, ctx := nftNamespace(t, 27, "dig")
	c, _ := helperConfig(t, n, b)
	c.IPFamilyMode = "ipv4"
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	docker := "*nat\n:DOCKER_OUTPUT - [0:0]\n-I OUTPUT 1 -d 127.0.0.11/32 -j DOCKER_OUTPUT\n" +
		"-A DOCKER_OUTPUT -d 127.0.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.11:40000\nCOMMIT\n"
	cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
	cmd.Stdin = strings.NewReader(docker)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("insert Docker's rules: %v\n%s", err, out)
	}
	dig := func() string {
		out, _ := n.exec(testAppUID, "dig", "+short", "+time=1", "+tries=1", "@127.0.0.11", "httpbin.mesh", "A")
		return out
	}
	if got := dig(); got == "240.0.0.1" {
		t.Fatal("the application's query reached our resolver with Docker's DNAT ahead of our jumps: the test's premise is wrong")
	}
	if d, err := Verify(ctx, c); err != nil || !strings.Contains(d, "DOCKER_OUTPUT") {
		t.Errorf("Verify = %q, %v; want the rule ahead of our jumps named", d, err)
	}
	if err := Install(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if got := dig(); got != "240.0.0.1" {
		t.Errorf("after install again, app dig @127.0.0.11 = %q; want our resolver's 240.0.0.1", got)
	}
	if d, err := Verify(ctx, c); err != nil || d != "" {
		t.Errorf("Verify after install again = %q, %v", d, err)
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
