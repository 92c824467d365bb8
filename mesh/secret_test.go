package mesh

import (
	"strings"
	"testing"
)

// A private key in a MeshExternalService is never echoed by an error, whatever is wrong with
// it: PEM text where base64 is expected, a key where a mapping is expected, a misspelt field.
func TestSecretsNeverEchoed(t *testing.T) {
	const marker = "SUPERSECRETKEYMATERIAL"
	pem := "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + marker + "\\n-----END PRIVATE KEY-----\\n"
	head := "type: MeshExternalService\nname: leak\nmesh: default\nspec:\n  match:\n    type: HostnameGenerator\n    port: 443\n    protocol: tcp\n" +
		"  endpoints:\n  - address: example.com\n    port: 443\n  tls:\n    enabled: true\n    verification:\n      clientCert:\n        secret: cert\n"
	for name, key := range map[string]string{
		"PEM as inline":           "      clientKey:\n        inline: \"" + pem + "\"\n",
		"PEM as the field":        "      clientKey: \"" + pem + "\"\n",
		"misspelt inline":         "      clientKey:\n        inlin: \"" + pem + "\"\n",
		"inline and inlineString": "      clientKey:\n        inline: \"" + pem + "\"\n        inlineString: \"" + pem + "\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode("mes.yaml", []byte(head+key))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("the key is in the error:\n%v", err)
			}
			if !strings.Contains(err.Error(), "clientKey") {
				t.Fatalf("the error does not name the field:\n%v", err)
			}
		})
	}
}
