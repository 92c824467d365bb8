package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// The configuration keeps control planes by name, the last added or switched to current, in
// a file only its owner reads (mode 0600 in a 0700 directory, even over a looser file).
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kuma-cp", "config.yaml")
	c, err := LoadConfig(path)
	if err != nil || c.Current() != nil {
		t.Fatalf("missing file: %+v %v", c, err)
	}
	if err := c.Add(ControlPlane{Name: "a", URL: "http://a:5681", AdminToken: "ta"}, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ControlPlane{Name: "b", URL: "http://b:5681"}, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ControlPlane{Name: "a", URL: "http://x:5681"}, false); err == nil {
		t.Error("a second control plane a was added without --overwrite")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	back, err := LoadConfig(path)
	if err != nil || back.Current().Name != "b" || back.Find("a").AdminToken != "ta" {
		t.Fatalf("read back: %+v %v", back, err)
	}
	if err := back.Switch("a"); err != nil || back.Current().URL != "http://a:5681" {
		t.Errorf("switch: %v", err)
	}
	if err := back.Switch("nope"); err == nil {
		t.Error("switched to an unknown control plane")
	}
	if err := back.Remove("a"); err != nil || back.Current() != nil || len(back.ControlPlanes) != 1 {
		t.Errorf("remove: %+v %v", back, err)
	}
}

// A command's API and token: the flags, over KUMA_API_URL and KUMA_ADMIN_TOKEN, over the
// current control plane of the configuration, over the default.
func TestResolvePrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	env := map[string]string{EnvConfig: path}
	getenv := func(k string) string { return env[k] }
	if got, _ := Resolve("", false, "", getenv); got.URL != DefaultAPIURL || got.Token != "" {
		t.Errorf("nothing configured: %+v", got)
	}
	c := &Config{}
	_ = c.Add(ControlPlane{Name: "prod", URL: "https://prod:5681", AdminToken: "tp"}, false)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := Resolve("", false, "", getenv); got.URL != "https://prod:5681" || got.Token != "tp" {
		t.Errorf("configured: %+v", got)
	}
	env[EnvAPIURL], env[EnvAdminToken] = "http://env:5681", "te\n"
	if got, _ := Resolve("", false, "", getenv); got.URL != "http://env:5681" || got.Token != "te" || got.From != "$KUMA_API_URL" {
		t.Errorf("environment: %+v", got)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("tf\n"), 0o600)
	if got, _ := Resolve("http://flag:5681", true, tokenFile, getenv); got.URL != "http://flag:5681" || got.Token != "tf" {
		t.Errorf("flags: %+v", got)
	}
	os.WriteFile(tokenFile, []byte("\n"), 0o600)
	if _, err := Resolve("", false, tokenFile, getenv); err == nil {
		t.Error("an empty token file was accepted")
	}
}
