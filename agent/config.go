package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/dirsource"
	"github.com/kumadp/kuma-dp/dnsserver"
	"github.com/kumadp/kuma-dp/internal/settings"
)

// Config is everything `kuma-dp run` can be told. The JSON names are the `--config` file's
// field paths (YAML), e.g. dns.proxyPort.
type Config struct {
	Dataplane        DataplaneConfig        `json:"dataplane"`
	Runtime          RuntimeConfig          `json:"dataplaneRuntime"`
	DNS              DNSConfig              `json:"dns"`
	Admin            AdminConfig            `json:"admin"`
	Log              LogConfig              `json:"log"`
	TransparentProxy TransparentProxyConfig `json:"transparentProxy"`
	ControlPlane     ControlPlaneConfig     `json:"controlPlane"`
}

// ControlPlaneConfig selects the control-plane link (cplink.Client) as the model's source
// instead of the files; see docs/cplink.md.
type ControlPlaneConfig struct {
	// URL is the control plane's address (Kuma's controlPlane.url): grpcs://host:port.
	URL string `json:"url"`
	// CACertFile is the PEM CA that signed the control plane's certificate.
	CACertFile string `json:"caCertFile"`
	// RetryBackoff is the first wait after a failed connection (doubling, with jitter, up
	// to 30 s); KeepaliveInterval how often the link checks the control plane answers.
	RetryBackoff      Duration `json:"retryBackoff"`
	KeepaliveInterval Duration `json:"keepaliveInterval"`
}

// MinKeepaliveInterval is the shortest controlPlane.keepaliveInterval taken (0 is the
// default, 10 s).
const MinKeepaliveInterval = 100 * time.Millisecond

// DataplaneConfig identifies the dataplane and how it stops.
type DataplaneConfig struct {
	// Name and Mesh, when set, must match the dataplane file (they guard against running
	// an agent with another workload's file).
	Name string `json:"name,omitempty"`
	Mesh string `json:"mesh,omitempty"`
	// DrainTime is how long Envoy drains (and readiness stays 503 with DNS still
	// answering) between SIGTERM and the parts stopping.
	DrainTime Duration `json:"drainTime"`
}

// RuntimeConfig is where the model comes from and where the agent keeps its state.
type RuntimeConfig struct {
	DataplaneFile string `json:"resourcePath"` // Kuma's name for the --dataplane-file path
	// ResourceVars fill the dataplane file's `{{ name }}` placeholders (Kuma's
	// --dataplane-var), e.g. address from the pod IP.
	ResourceVars map[string]string `json:"resourceVars,omitempty"`
	PoliciesDir  string            `json:"policiesDir"`
	// TokenPath is the dataplane token sent to the control plane (--dataplane-token-file).
	TokenPath string `json:"tokenPath"`
	// Watch is auto (inotify, else polling), inotify or poll.
	Watch string `json:"watch"`
	// WorkDir holds the VIP state file, Envoy's bootstrap and sockets.
	WorkDir string `json:"workDir"`
	// Envoy: run Envoy (when found at BinaryPath, in PATH or beside kuma-dp).
	Envoy      bool   `json:"envoy"`
	BinaryPath string `json:"binaryPath,omitempty"`
	// ReadyFile, when set, receives the bound addresses as JSON once the agent is ready.
	ReadyFile string `json:"readyFile,omitempty"`
	// MaxFileSizeMiB refuses a resource file larger than this (served at its last good
	// version), MaxTotalSizeMiB a model whose files are larger in all (the last good model
	// stays); 0 = no limit.
	MaxFileSizeMiB  int64 `json:"maxFileSizeMiB"`
	MaxTotalSizeMiB int64 `json:"maxTotalSizeMiB"`
}

// DNSConfig configures the embedded resolver.
type DNSConfig struct {
	// Addresses to listen on (IPs, no port); empty means 127.0.0.1 and ::1 (where the host
	// has IPv6).
	Addresses []string `json:"addresses,omitempty"`
	// ProxyPort for every address; 0 picks a free port (tests), read it back from the
	// ready file or the log.
	ProxyPort int      `json:"proxyPort"`
	Upstreams []string `json:"upstreams,omitempty"`
	TTL       Duration `json:"ttl"`
	// ResolvConf gives the upstreams (when Upstreams is empty) and the search domains.
	ResolvConf       string `json:"resolvConf"`
	CorefileTemplate string `json:"corefileTemplate,omitempty"`
}

// AdminConfig is the admin HTTP endpoint.
type AdminConfig struct {
	Address string `json:"address"`
	// ReadinessAddress, when set, serves GET /ready alone on any address (for a kubelet's
	// readiness probe, which cannot reach the loopback-only admin endpoint).
	ReadinessAddress string `json:"readinessAddress,omitempty"`
	// Pprof serves Go's profiles under /debug/pprof/ on the admin endpoint (loopback only).
	Pprof bool `json:"pprof,omitempty"`
}

// LogConfig is the agent's logging.
type LogConfig struct {
	Level  string `json:"level"`
	Format string `json:"format"`
}

// TransparentProxyConfig makes `run` install the transparent proxy itself (on a VM; in a
// pod an init container usually does it).
type TransparentProxyConfig struct {
	Enabled         bool `json:"enabled"`
	UninstallOnExit bool `json:"uninstallOnExit"`
}

// Defaults returns the configuration used when nothing else is said.
func Defaults() Config {
	return Config{
		Dataplane: DataplaneConfig{DrainTime: Duration(30 * time.Second)},
		Runtime: RuntimeConfig{Watch: "auto", Envoy: true,
			MaxFileSizeMiB: dirsource.DefaultMaxFileBytes >> 20, MaxTotalSizeMiB: dirsource.DefaultMaxTotalBytes >> 20},
		DNS:   DNSConfig{ProxyPort: 15053, TTL: Duration(dnsserver.DefaultTTL * time.Second), ResolvConf: "/etc/resolv.conf"},
		Admin: AdminConfig{Address: "127.0.0.1:9902"},
		Log:   LogConfig{Level: "info", Format: "text"},
		ControlPlane: ControlPlaneConfig{RetryBackoff: Duration(cplink.DefaultBackoff),
			KeepaliveInterval: Duration(cplink.DefaultKeepaliveInterval)},
	}
}

// FieldError is a bad configuration value: the field path (as in the config file) and the
// value. The CLI adds the flag and environment variable that set it.
type FieldError struct {
	Field string
	Value string
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s (value %q)", e.Field, e.Msg, e.Value)
}

// Validate checks every value and returns the first bad one.
func (c *Config) Validate() error {
	for _, check := range []func() error{c.validateSource, c.validateRuntime, c.validateDNS, c.validateAdmin, c.validateLog} {
		if err := check(); err != nil {
			return err
		}
	}
	if c.TransparentProxy.UninstallOnExit && !c.TransparentProxy.Enabled {
		return bad("transparentProxy.uninstallOnExit", "true", "needs transparentProxy.enabled")
	}
	return nil
}

// bad is the error of field, holding value.
func bad(field, value, msg string) error { return &FieldError{Field: field, Value: value, Msg: msg} }

// validateSource checks where the model comes from: a control plane (and how to reach it) or
// the dataplane file.
func (c *Config) validateSource() error {
	if c.ControlPlane.URL != "" {
		if c.Runtime.DataplaneFile == "" && c.Dataplane.Name == "" {
			return bad("dataplane.name", "", "required with a control plane and no dataplane file: the dataplane's name at the control plane")
		}
		if c.Runtime.PoliciesDir != "" {
			return bad("dataplaneRuntime.policiesDir", c.Runtime.PoliciesDir, "the policies come from the control plane (controlPlane.url): give one or the other")
		}
		if err := cplink.CheckAddress(c.ControlPlane.URL); err != nil {
			return bad("controlPlane.url", c.ControlPlane.URL, err.Error())
		}
		if c.ControlPlane.RetryBackoff < 0 {
			return bad("controlPlane.retryBackoff", c.ControlPlane.RetryBackoff.String(), "must not be negative")
		}
		if c.ControlPlane.RetryBackoff > Duration(cplink.DefaultMaxBackoff) {
			return bad("controlPlane.retryBackoff", c.ControlPlane.RetryBackoff.String(),
				"must be at most "+cplink.DefaultMaxBackoff.String()+" (the longest wait between attempts)")
		}
		// The link waits for each keepalive's answer as long as the interval (at most 5 s):
		// a shorter one drops a healthy control plane whenever it answers slower.
		if iv := c.ControlPlane.KeepaliveInterval; iv < 0 || (iv > 0 && iv < Duration(MinKeepaliveInterval)) {
			return bad("controlPlane.keepaliveInterval", iv.String(), "must be 0 (the default, "+
				cplink.DefaultKeepaliveInterval.String()+") or at least "+MinKeepaliveInterval.String())
		}
	} else if c.Runtime.DataplaneFile == "" {
		return bad("dataplaneRuntime.resourcePath", "", "required: the dataplane's resource file (or a control plane: controlPlane.url)")
	}
	return nil
}

// validateRuntime checks the dataplane file's variables, the drain time, the size limits and
// how files are watched.
func (c *Config) validateRuntime() error {
	for k, v := range c.Runtime.ResourceVars {
		if !cplink.ValidVarName(k) {
			return bad("dataplaneRuntime.resourceVars", k+"="+v, "the name must be a letter or _ followed by letters, digits, _ . or -")
		}
		// A line break in a value adds lines to the dataplane file (fields of their own, or
		// a YAML error naming neither the variable nor this setting).
		if strings.ContainsFunc(v, unicode.IsControl) {
			return bad("dataplaneRuntime.resourceVars", k+"="+v, "the value has a line break or another control character")
		}
	}
	if c.Dataplane.DrainTime < 0 {
		return bad("dataplane.drainTime", c.Dataplane.DrainTime.String(), "must not be negative")
	}
	if c.Runtime.MaxFileSizeMiB < 0 {
		return bad("dataplaneRuntime.maxFileSizeMiB", strconv.FormatInt(c.Runtime.MaxFileSizeMiB, 10), "must be 0 (no limit) or more")
	}
	if c.Runtime.MaxTotalSizeMiB < 0 {
		return bad("dataplaneRuntime.maxTotalSizeMiB", strconv.FormatInt(c.Runtime.MaxTotalSizeMiB, 10), "must be 0 (no limit) or more")
	}
	switch c.Runtime.Watch {
	case "auto", "inotify", "poll":
	default:
		return bad("dataplaneRuntime.watch", c.Runtime.Watch, "must be auto, inotify or poll")
	}
	return nil
}

// validateDNS checks the resolver's port, addresses, upstreams and TTL.
func (c *Config) validateDNS() error {
	if c.DNS.ProxyPort < 0 || c.DNS.ProxyPort > 65535 {
		return bad("dns.proxyPort", strconv.Itoa(c.DNS.ProxyPort), "must be a port number, 0-65535")
	}
	for _, a := range c.DNS.Addresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return bad("dns.addresses", a, "must be an IP address (the port is dns.proxyPort)")
		}
	}
	for _, u := range c.DNS.Upstreams {
		if !validUpstream(u) {
			return bad("dns.upstreams", u, "must be IP or IP:port")
		}
	}
	if time.Duration(c.DNS.TTL) < time.Second || time.Duration(c.DNS.TTL) > 24*time.Hour {
		return bad("dns.ttl", c.DNS.TTL.String(), "must be between 1s and 24h (whole seconds)")
	}
	return nil
}

// validateAdmin checks the admin endpoint (loopback only) and the readiness endpoint.
func (c *Config) validateAdmin() error {
	host, port, err := net.SplitHostPort(c.Admin.Address)
	if err != nil || !validPort(port) {
		return bad("admin.address", c.Admin.Address, "must be IP:port, the port 0-65535")
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return bad("admin.address", c.Admin.Address, "must be a loopback IP:port (the admin endpoint is not authenticated)")
	}
	if r := c.Admin.ReadinessAddress; r != "" {
		host, port, err := net.SplitHostPort(r)
		if err == nil && host != "" {
			_, err = netip.ParseAddr(host)
		}
		if err != nil || !validPort(port) {
			return bad("admin.readinessAddress", r, "must be [IP]:port, the port 0-65535")
		}
	}
	return nil
}

// validateLog checks the log level and format.
func (c *Config) validateLog() error {
	if _, err := ParseLevel(c.Log.Level); err != nil {
		return bad("log.level", c.Log.Level, "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", c.Log.Format, "must be text or json")
	}
	return nil
}

// validPort tells whether p is a port number, 0-65535, written in decimal.
func validPort(p string) bool {
	_, err := strconv.ParseUint(p, 10, 16) // 16 bits: a value over 65535 is an error
	return err == nil
}

func validUpstream(u string) bool {
	if _, err := netip.ParseAddr(u); err == nil {
		return true
	}
	_, err := netip.ParseAddrPort(u)
	return err == nil
}

// Duration is a time.Duration written as "30s" in the config file (a number of seconds is
// accepted too).
type Duration time.Duration

// ConfigScalars tells the config file reader (internal/settings) how a Duration is written.
var ConfigScalars = settings.Scalars{reflect.TypeFor[Duration](): func(text string) (any, error) {
	if _, err := strconv.ParseFloat(text, 64); err == nil {
		return json.Number(text), nil // seconds
	}
	if _, err := time.ParseDuration(strings.TrimSpace(text)); err != nil {
		return nil, fmt.Errorf("want a duration like \"30s\" (value %q)", text)
	}
	return text, nil
}}

// ConfigTypes binds a Duration to its flag and environment variable (as a time.Duration).
var ConfigTypes = map[reflect.Type]func(field any) pflag.Value{
	reflect.TypeFor[Duration](): func(field any) pflag.Value {
		return settings.ValueOf((*time.Duration)(field.(*Duration)))
	},
}

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "30s" or 30 (seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err2 := json.Unmarshal(b, &secs); err2 != nil {
			return fmt.Errorf("want a duration like \"30s\", got %s", b)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a duration like \"30s\", got %q", s)
	}
	*d = Duration(v)
	return nil
}
