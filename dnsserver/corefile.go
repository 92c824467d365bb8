package dnsserver

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/coredns/caddy/caddyfile"
)

// CorefileData is what a Corefile template sees.
type CorefileData struct {
	// ID names this server to the kumavip plugin: every block needs "kumavip {{.ID}}".
	ID string
	// Blocks are the listen addresses grouped by port: one server block each.
	Blocks []CorefileBlock
	// TTL of the VIP answers, seconds.
	TTL uint32
	// Upstreams are ip:port pairs for forward.
	Upstreams []string
	// SearchDomains from resolv.conf (the kumavip plugin answers <hostname>.<domain>).
	SearchDomains []string
}

// CorefileBlock is one port and the hosts bound on it.
type CorefileBlock struct {
	Port  uint16
	Hosts []string
}

// DefaultCorefileTemplate is the Corefile kuma-dp generates. kumavip comes first in the
// chain whatever the order here (the order is CoreDNS's directive list), so VIP answers
// never reach cache or forward. forward retries over TCP when a UDP answer is truncated
// (prefer_udp) and answers SERVFAIL at once when every upstream is marked down.
const DefaultCorefileTemplate = `{{range .Blocks}}.:{{.Port}} {
    bind{{range .Hosts}} {{.}}{{end}}
    kumavip {{$.ID}}
    kumaroutes {{$.ID}}
    cache 30
    forward .{{range $.Upstreams}} {{.}}{{end}} {
        prefer_udp
        failfast_all_unhealthy_upstreams
    }
}
{{end}}`

func corefileData(id string, n normalized) CorefileData {
	d := CorefileData{ID: id, TTL: n.ttl, Upstreams: n.upstreams, SearchDomains: n.search}
	for _, ap := range n.addrs {
		i := slices.IndexFunc(d.Blocks, func(b CorefileBlock) bool { return b.Port == ap.Port() })
		if i < 0 || ap.Port() == 0 { // port 0: each address gets its own free port
			d.Blocks = append(d.Blocks, CorefileBlock{Port: ap.Port()})
			i = len(d.Blocks) - 1
		}
		d.Blocks[i].Hosts = append(d.Blocks[i].Hosts, ap.Addr().String())
	}
	return d
}

// renderCorefile executes the template (the default one when tmpl is empty) and checks
// that every server block carries our plugin with our id and serves plain DNS.
func renderCorefile(tmpl string, d CorefileData) (string, error) {
	field := "corefile_template"
	if tmpl == "" {
		tmpl, field = DefaultCorefileTemplate, "default corefile"
	}
	t, err := template.New("Corefile").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("dnsserver: %s: %v", field, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("dnsserver: %s: %v", field, err)
	}
	blocks, err := caddyfile.Parse("Corefile", bytes.NewReader(b.Bytes()), nil)
	if err != nil {
		return "", fmt.Errorf("dnsserver: %s: rendered Corefile: %v", field, err)
	}
	if len(blocks) == 0 {
		return "", fmt.Errorf("dnsserver: %s: rendered Corefile has no server block", field)
	}
	for _, sb := range blocks {
		toks := sb.Tokens[pluginName]
		if len(toks) < 2 || toks[1].Text != d.ID {
			return "", fmt.Errorf("dnsserver: %s: server block %q has no %q line: every block must contain \"%s {{.ID}}\"",
				field, strings.Join(sb.Keys, " "), pluginName+" "+d.ID, pluginName)
		}
		for _, k := range sb.Keys {
			if i := strings.Index(k, "://"); i >= 0 && k[:i] != "dns" {
				return "", fmt.Errorf("dnsserver: %s: server block %q: only plain DNS (dns://) is served", field, k)
			}
		}
	}
	return b.String(), nil
}

// listenAddr turns a CoreDNS server address ("dns://127.0.0.1:15053") into an AddrPort.
func listenAddr(s string) (netip.AddrPort, error) {
	s = strings.TrimPrefix(s, "dns://")
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, fmt.Errorf("server address %q: %v", s, err)
	}
	return ap, nil
}

func newID() string {
	idMu.Lock()
	defer idMu.Unlock()
	idSeq++
	return "kdp" + strconv.FormatUint(idSeq, 10)
}
