package xds

import "os"

// systemCAPaths are the usual CA bundle locations, in the order Envoy's documentation lists
// the distributions.
var systemCAPaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // RHEL/CentOS 7+, Fedora
	"/etc/pki/tls/certs/ca-bundle.crt",                  // RHEL 6, Amazon Linux
	"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
	"/usr/local/etc/ssl/cert.pem",                       // FreeBSD
}

// FindSystemCA returns the first non-empty system CA bundle found, or "" when there is none.
// Used as the trusted CA of MeshExternalServices that originate TLS without giving one.
func FindSystemCA() string { return findCA(systemCAPaths) }

func findCA(paths []string) string {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			return p
		}
	}
	return ""
}
