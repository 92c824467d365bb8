package tproxy

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// istioLeftovers is what istio-iptables leaves in nat (its sidecar mode, UID 1337).
const istioLeftovers = `*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
:ISTIO_REDIRECT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`

// Istio's sidecar rules left on a host (istio-iptables, UID 1337): after our jumps, they
// redirect what ours leave alone - the agent's own connections go to port 15001, Envoy
// calling Envoy. Install cannot remove them (they are not ours) but says so, naming the
// rule; the application's traffic is still ours.
func TestIstioLeftoversAreReported(t *testing.T) {
	b, n, ctx := nftNamespace(t, 23, "bash", "timeout")
	cmd := exec.Command("ip", "netns", "exec", n.name, b.bin(IPv4, "restore"), "--noflush", "--wait=5")
	cmd.Stdin = strings.NewReader(istioLeftovers)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plant Istio's rules: %v\n%s", err, out)
	}
	upPort := n.upstream(t)
	c, _ := helperConfig(t, n, b)
	c.IPFamilyMode = "ipv4"
	var logs strings.Builder
	if err := Install(ctx, c, testLoggerTo(t, &logs)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "REDIRECT --to-ports 15001") || !strings.Contains(logs.String(), "agent") {
		t.Errorf("install did not report Istio's redirect of what ours leave alone:\n%s", logs.String())
	}
	up := netip.AddrPortFrom(n.host4, upPort)
	if out, _ := n.exec(testAppUID, bashTCP(up)[0], bashTCP(up)[1:]...); out != "orig="+up.String() {
		t.Errorf("application tcp = %q, want our outbound listener", out)
	}
	if err := Uninstall(ctx, c, testLogger(t)); err != nil {
		t.Fatal(err)
	}
}
