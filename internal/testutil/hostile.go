package testutil

import "strings"

// The adversarial campaign's hostile resources, shared by the agent's and the control
// plane's end-to-end tests: each must be refused naming its field, never crash what serves,
// and never be echoed whole (the bomb) or at all (the key).

// BombTail ends BombHost: an output that shows it shows the value whole.
const BombTail = "{{$x}}.mesh"

// SecretMarker sits inside the PEM private key of PEMKeyPolicy.
const SecretMarker = "SUPERSECRETKEYMATERIAL"

// BombHost is the template memory bomb: a reassigned variable doubled 32 times (8 GiB if
// rendered unbounded).
func BombHost() string {
	var b strings.Builder
	b.WriteString(`{{$x := printf "%s" "ab"}}`)
	for range 32 {
		b.WriteString(`{{$x = printf "%s%s" $x $x}}`)
	}
	b.WriteString(BombTail)
	return b.String()
}

// BombPolicy is a VirtualOutbound whose conf.host is BombHost.
func BombPolicy() string {
	return "type: VirtualOutbound\nmesh: default\nname: bomb\nselectors:\n- match:\n    kuma.io/service: \"*\"\n" +
		"conf:\n  host: '" + BombHost() + "'\n  port: \"80\"\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n"
}

// PEMKeyPolicy is a MeshExternalService whose clientKey holds a PEM private key (with
// SecretMarker inside) where base64 is expected.
func PEMKeyPolicy() string {
	pem := "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + SecretMarker + "\\n-----END PRIVATE KEY-----\\n"
	return "type: MeshExternalService\nname: leak\nmesh: default\nspec:\n  match:\n    type: HostnameGenerator\n    port: 443\n    protocol: tcp\n" +
		"  endpoints:\n  - address: example.com\n    port: 443\n  tls:\n    enabled: true\n    verification:\n      clientCert:\n        secret: cert\n" +
		"      clientKey:\n        inline: \"" + pem + "\"\n"
}

// GeneratingZone is a DNSZone named evil.test (a kind only the control plane builds) whose
// zone holds a $GENERATE line: written by a user in a file, the store or the API, it took
// an agent to gigabytes; it must be refused wherever users write resources.
func GeneratingZone() string {
	return "type: DNSZone\nname: evil.test\norigin: evil.test\nzone: |\n  $ORIGIN evil.test.\n" +
		"  @ 30 IN SOA ns.evil.test. h.evil.test. 1 300 60 1209600 30\n  $GENERATE 0-65535 a$ A 10.0.0.1\n"
}
