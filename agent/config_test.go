package agent

import (
	"errors"
	"testing"
	"time"
)

// Validate names the first bad field of a configuration, whichever part it is in; a good
// configuration passes.
func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := Defaults()
		c.Runtime.DataplaneFile = "/etc/kuma/dataplane.yaml"
		return c
	}
	withCP := func(c *Config) {
		c.Runtime.DataplaneFile, c.Dataplane.Name, c.ControlPlane.URL = "", "web-1", "grpcs://cp:5678"
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"", func(*Config) {}},
		{"", withCP},
		{"", func(c *Config) {
			c.Admin.ReadinessAddress = ":9903"
			c.TransparentProxy.Enabled, c.TransparentProxy.UninstallOnExit = true, true
		}},
		{"dataplaneRuntime.resourcePath", func(c *Config) { c.Runtime.DataplaneFile = "" }},
		{"dataplane.name", func(c *Config) { withCP(c); c.Dataplane.Name = "" }},
		{"dataplaneRuntime.policiesDir", func(c *Config) { withCP(c); c.Runtime.PoliciesDir = "/policies" }},
		{"controlPlane.url", func(c *Config) { withCP(c); c.ControlPlane.URL = "ftp://cp" }},
		{"controlPlane.retryBackoff", func(c *Config) { withCP(c); c.ControlPlane.RetryBackoff = -1 }},
		{"controlPlane.retryBackoff", func(c *Config) { withCP(c); c.ControlPlane.RetryBackoff = Duration(time.Hour) }},
		{"controlPlane.keepaliveInterval", func(c *Config) { withCP(c); c.ControlPlane.KeepaliveInterval = Duration(time.Millisecond) }},
		{"dataplaneRuntime.resourceVars", func(c *Config) { c.Runtime.ResourceVars = map[string]string{"1x": "a"} }},
		{"dataplaneRuntime.resourceVars", func(c *Config) { c.Runtime.ResourceVars = map[string]string{"x": "a\nb: c"} }},
		{"dataplane.drainTime", func(c *Config) { c.Dataplane.DrainTime = -1 }},
		{"dataplaneRuntime.maxFileSizeMiB", func(c *Config) { c.Runtime.MaxFileSizeMiB = -1 }},
		{"dataplaneRuntime.maxTotalSizeMiB", func(c *Config) { c.Runtime.MaxTotalSizeMiB = -1 }},
		{"dataplaneRuntime.watch", func(c *Config) { c.Runtime.Watch = "fanotify" }},
		{"dns.proxyPort", func(c *Config) { c.DNS.ProxyPort = 70000 }},
		{"dns.addresses", func(c *Config) { c.DNS.Addresses = []string{"127.0.0.1:53"} }},
		{"dns.upstreams", func(c *Config) { c.DNS.Upstreams = []string{"dns.google"} }},
		{"dns.ttl", func(c *Config) { c.DNS.TTL = Duration(time.Millisecond) }},
		{"admin.address", func(c *Config) { c.Admin.Address = "127.0.0.1" }},
		{"admin.address", func(c *Config) { c.Admin.Address = "0.0.0.0:9902" }},
		{"admin.readinessAddress", func(c *Config) { c.Admin.ReadinessAddress = "localhost:9903" }},
		{"log.level", func(c *Config) { c.Log.Level = "verbose" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
		{"transparentProxy.uninstallOnExit", func(c *Config) { c.TransparentProxy.UninstallOnExit = true }},
	} {
		c := good()
		tc.edit(&c)
		err := c.Validate()
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("a good configuration refused: %v", err)
		case tc.field != "" && !errors.As(err, &fe):
			t.Errorf("%s: want a FieldError, got %v", tc.field, err)
		case tc.field != "" && fe.Field != tc.field:
			t.Errorf("want %s named, got %v", tc.field, err)
		}
	}
}
