package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the client configuration of kuma-cp's API commands, as kumactl's: the control
// planes known by name, each with its API URL and admin token, and the current one. It is
// kept in a file only its owner reads (mode 0600: it holds tokens).
type Config struct {
	CurrentContext string         `json:"currentContext"`
	ControlPlanes  []ControlPlane `json:"controlPlanes"`
}

// ControlPlane is one control plane's API.
type ControlPlane struct {
	Name       string `json:"name"`
	URL        string `json:"url"`
	AdminToken string `json:"adminToken,omitempty"`
}

// Environment variables of the API commands: each stands for its flag, between the
// configuration file and the command line.
const (
	EnvConfig     = "KUMA_CP_CONFIG"   // the configuration file
	EnvAPIURL     = "KUMA_API_URL"     // --api-url
	EnvAdminToken = "KUMA_ADMIN_TOKEN" // the admin token itself (--admin-token-file names a file)
)

// DefaultAPIURL is the API of a kuma-cp serve on this host.
const DefaultAPIURL = "http://127.0.0.1:5681"

// ConfigPath is the configuration file: $KUMA_CP_CONFIG, else kuma-cp/config.yaml under the
// user's configuration directory ($XDG_CONFIG_HOME, ~/.config).
func ConfigPath(getenv func(string) string) (string, error) {
	if p := getenv(EnvConfig); p != "" {
		return p, nil
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return "", fmt.Errorf("no configuration directory: set $HOME, $XDG_CONFIG_HOME or $%s", EnvConfig)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "kuma-cp", "config.yaml"), nil
}

// LoadConfig reads the configuration file; a missing file is an empty configuration.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// Save writes the configuration to path, mode 0600 in a directory of mode 0700 (created
// when missing), replacing the file at once (a temporary file renamed over it).
func (c *Config) Save(path string) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Find returns the control plane named name (nil when none).
func (c *Config) Find(name string) *ControlPlane {
	for i := range c.ControlPlanes {
		if c.ControlPlanes[i].Name == name {
			return &c.ControlPlanes[i]
		}
	}
	return nil
}

// Add adds a control plane and makes it the current one; one of that name is replaced only
// when overwrite is set.
func (c *Config) Add(cp ControlPlane, overwrite bool) error {
	if cp.Name == "" {
		return errors.New("--name is required")
	}
	if old := c.Find(cp.Name); old != nil {
		if !overwrite {
			return fmt.Errorf("control plane %q exists already (--overwrite replaces it)", cp.Name)
		}
		*old = cp
	} else {
		c.ControlPlanes = append(c.ControlPlanes, cp)
	}
	c.CurrentContext = cp.Name
	return nil
}

// Switch makes the control plane named name the current one.
func (c *Config) Switch(name string) error {
	if c.Find(name) == nil {
		return fmt.Errorf("no control plane %q (known: %s)", name, c.names())
	}
	c.CurrentContext = name
	return nil
}

// Remove forgets the control plane named name (the current one is then none).
func (c *Config) Remove(name string) error {
	for i := range c.ControlPlanes {
		if c.ControlPlanes[i].Name == name {
			c.ControlPlanes = append(c.ControlPlanes[:i], c.ControlPlanes[i+1:]...)
			if c.CurrentContext == name {
				c.CurrentContext = ""
			}
			return nil
		}
	}
	return fmt.Errorf("no control plane %q (known: %s)", name, c.names())
}

func (c *Config) names() string {
	if len(c.ControlPlanes) == 0 {
		return "none: kuma-cp config control-planes add --name NAME --address URL"
	}
	var ns []string
	for _, cp := range c.ControlPlanes {
		ns = append(ns, cp.Name)
	}
	return strings.Join(ns, ", ")
}

// Current is the current control plane (nil when none).
func (c *Config) Current() *ControlPlane { return c.Find(c.CurrentContext) }

// Target is the API an API command talks to, and the admin token it sends.
type Target struct {
	URL, Token string
	// From says where the URL came from (a flag, a variable, the configuration's control
	// plane), for errors.
	From string
}

// Resolve is the API and token of a command: the flags given (urlFlag when urlSet, the
// content of tokenFile when not empty) over the environment (KUMA_API_URL,
// KUMA_ADMIN_TOKEN) over the current control plane of the configuration file, over the
// default (this host's API, no token).
func Resolve(urlFlag string, urlSet bool, tokenFile string, getenv func(string) string) (Target, error) {
	t := Target{URL: DefaultAPIURL, From: "the default"}
	path, err := ConfigPath(getenv)
	if err == nil {
		cfg, err := LoadConfig(path)
		if err != nil {
			return t, err
		}
		if cp := cfg.Current(); cp != nil {
			t = Target{URL: cp.URL, Token: cp.AdminToken, From: fmt.Sprintf("control plane %q of %s", cp.Name, path)}
		}
	}
	if v := getenv(EnvAPIURL); v != "" {
		t.URL, t.From = v, "$"+EnvAPIURL
	}
	if v := getenv(EnvAdminToken); v != "" {
		t.Token = strings.TrimSpace(v)
	}
	if urlSet {
		t.URL, t.From = urlFlag, "--api-url"
	}
	if tokenFile != "" {
		if t.Token, err = ReadToken(tokenFile); err != nil {
			return t, err
		}
	}
	return t, nil
}

// ReadToken reads an admin token file (--admin-token-file): not empty.
func ReadToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file %q: %w", file, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--admin-token-file %q is empty: it holds the admin token kuma-cp serve was given", file)
	}
	return token, nil
}
