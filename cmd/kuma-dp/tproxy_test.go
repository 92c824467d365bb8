package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runTproxyTest(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runTproxyEnv(args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

func TestTproxyCmdPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tproxy.yaml")
	writeTproxyFile(t, file, "redirectOutboundPort: 1111\nredirectInboundPort: 2222\nredirectDNSPort: 3333\nipFamilyMode: ipv4\nexcludeOutboundIPs: [10.0.0.0/8]\n")
	withIP := filepath.Join(t.TempDir(), "ips.yaml")
	writeTproxyFile(t, withIP, "kumaDPUser: root\nexcludeOutboundIPs: [169.254.169.254, 10.1.0.0/16]\nexcludeOutboundPortsForUIDs: [\"tcp:5432:1001\"]\nipFamilyMode: ipv4\n")
	if code, out, errs := runTproxyTest(t, nil, "install", "--dry-run", "--config", withIP); code != exitOK ||
		!strings.Contains(out, "-d 169.254.169.254/32 ") || !strings.Contains(out, "--uid-owner 0 ") || !strings.Contains(out, "--dports 5432 -m owner --uid-owner 1001") {
		t.Fatalf("config with a bare IP and a user name: exit %d\n%s\n%s", code, out, errs)
	}
	env := map[string]string{
		"KUMA_TRANSPARENT_PROXY_REDIRECT_INBOUND_PORT": "4444",
		"KUMA_TRANSPARENT_PROXY_REDIRECT_DNS_PORT":     "5555",
		"KUMA_TRANSPARENT_PROXY_EXCLUDE_OUTBOUND_IPS":  "192.168.0.0/16,172.16.0.1",
	}
	code, out, errs := runTproxyTest(t, env, "install", "--dry-run", "--config", file, "--redirect-dns-port", "6666",
		"--exclude-outbound-ports-for-uids", "tcp:80,443:1000", "--exclude-outbound-ports-for-uids", "udp:53:7")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"--to-ports 1111",                           // file (no env, no flag)
		"--to-ports 4444",                           // env over file
		"--to-ports 6666",                           // flag over env and file
		"-d 192.168.0.0/16 ",                        // env list replaces the file's
		"-d 172.16.0.1/32 ",                         // an address is a /32
		"--dports 80,443 -m owner --uid-owner 1000", // repeated flag, entries with commas
		"-p udp -m multiport --dports 53 -m owner --uid-owner 7",
		"# interface lo ",
		"# iptables backend:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"--to-ports 2222", "--to-ports 3333", "--to-ports 5555", "10.0.0.0/8", "transparent proxy, ipv6", "-s ::6/128"} {
		if strings.Contains(out, not) {
			t.Errorf("dry-run output has %q, overridden or out of family:\n%s", not, out)
		}
	}
}

func writeTproxyFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTproxyCmdErrors(t *testing.T) {
	dir := t.TempDir()
	badKey := filepath.Join(dir, "bad.yaml")
	writeTproxyFile(t, badKey, "redirectOutbondPort: 1\n")
	badIP := filepath.Join(dir, "badip.yaml")
	writeTproxyFile(t, badIP, "excludeOutboundIPs: [10.0.0.1, 10.0.0.300]\n")
	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want []string // in stderr
	}{
		{"no action", nil, nil, exitUsage, []string{"want exactly one of install, uninstall, verify"}},
		{"unknown action", nil, []string{"reinstall"}, exitUsage, []string{`unknown action "reinstall"`}},
		{"unknown flag", nil, []string{"install", "--redirect-outbund-port", "1"}, exitUsage, []string{"unknown flag: --redirect-outbund-port"}},
		{"port zero", nil, []string{"install", "--dry-run", "--redirect-outbound-port", "0"}, exitInvalid, []string{"--redirect-outbound-port", `"0" is not a port`}},
		{"port in env", map[string]string{"KUMA_TRANSPARENT_PROXY_REDIRECT_INBOUND_PORT": "http"}, []string{"install", "--dry-run"}, exitInvalid, []string{"KUMA_TRANSPARENT_PROXY_REDIRECT_INBOUND_PORT", `"http"`}},
		{"family mode", nil, []string{"verify", "--ip-family-mode", "ipv6only"}, exitInvalid, []string{`--ip-family-mode="ipv6only"`, "dualstack"}},
		{"every error listed", map[string]string{"KUMA_TRANSPARENT_PROXY_REDIRECT_INBOUND_PORT": "x"}, []string{"install", "--redirect-outbound-port", "0", "--ip-family-mode", "v6"}, exitInvalid,
			[]string{`KUMA_TRANSPARENT_PROXY_REDIRECT_INBOUND_PORT: "x"`, `--redirect-outbound-port: "0"`, `--ip-family-mode="v6"`}},
		{"backend", nil, []string{"install", "--dry-run", "--iptables-executables", "xtables"}, exitInvalid, []string{`--iptables-executables="xtables"`}},
		{"ports for uids", nil, []string{"install", "--dry-run", "--exclude-outbound-ports-for-uids", "sctp:80:1"}, exitInvalid, []string{`--exclude-outbound-ports-for-uids="sctp:80:1"`, "protocol"}},
		{"same ports", nil, []string{"install", "--dry-run", "--redirect-inbound-port", "15001"}, exitInvalid, []string{"--redirect-inbound-port=15001", "must differ"}},
		{"unknown user", nil, []string{"install", "--dry-run", "--kuma-dp-user", "no-such-user-kdp"}, exitInvalid, []string{`--kuma-dp-user="no-such-user-kdp"`}},
		{"bad ip", nil, []string{"install", "--dry-run", "--exclude-outbound-ips", "10.0.0.300"}, exitInvalid, []string{"--exclude-outbound-ips", `"10.0.0.300"`}},
		{"config key", nil, []string{"install", "--dry-run", "--config", badKey}, exitInvalid, []string{"redirectOutbondPort"}},
		{"config bad ip", nil, []string{"install", "--dry-run", "--config", badIP}, exitInvalid, []string{"excludeOutboundIPs[1]", `"10.0.0.300"`}},
		{"config missing", nil, []string{"install", "--config", filepath.Join(dir, "none.yaml")}, exitInvalid, []string{"--config", "none.yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runTproxyTest(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if strings.Contains(errs, "=0: must be between") {
				t.Errorf("a value that did not parse is reported twice:\n%s", errs)
			}
		})
	}
}

func TestTproxyCmdHelp(t *testing.T) {
	code, out, _ := runTproxyTest(t, nil, "--help")
	if code != exitOK || !strings.Contains(out, "kuma-dp tproxy install --dry-run") || !strings.Contains(out, "KUMA_TRANSPARENT_PROXY_REDIRECT_OUTBOUND_PORT") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
}

// TestTproxyCmdInNetns drives install, verify, uninstall from the CLI in a network namespace
// (--netns): verify exits 0 when the rules match and 1 with the difference otherwise.
func TestTproxyCmdInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables): run as root, as CI does")
	}
	for _, tool := range []string{"ip", "iptables-nft-restore", "ip6tables-nft-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: install the Debian packages iproute2 and iptables", tool)
		}
	}
	ns := fmt.Sprintf("kdp-cli-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (a container without CAP_SYS_ADMIN?): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// An interface with global addresses, so install can route the VIP ranges through it.
	for _, args := range [][]string{
		{"link", "add", "kdpcli0", "type", "veth", "peer", "name", "kdpcli1"},
		{"addr", "add", "10.99.0.1/24", "dev", "kdpcli0"},
		{"-6", "addr", "add", "fd6b:6470:99::1/64", "dev", "kdpcli0", "nodad"},
		{"link", "set", "kdpcli0", "up"},
		{"link", "set", "kdpcli1", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	common := []string{"--netns", ns, "--iptables-executables", "nft", "--state-file", filepath.Join(t.TempDir(), "state.json")}
	step := func(wantCode int, args ...string) string {
		t.Helper()
		code, out, errs := runTproxyTest(t, nil, append(args, common...)...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out, errs)
		}
		return out
	}
	if out := step(exitOK, "uninstall", "--dry-run"); !strings.Contains(out, "nothing of kuma-dp installed") {
		t.Errorf("uninstall --dry-run before install: %s", out)
	}
	step(exitOK, "install")
	if out := step(exitOK, "verify"); !strings.Contains(out, "up to date") || !strings.Contains(out, "# interface kdpcli0 ") ||
		!strings.Contains(out, "# VIP range 240.0.0.0/4: covered by 240.0.0.0/4 dev kdpcli0") {
		t.Errorf("verify: %s", out)
	}
	if out := step(exitInvalid, "verify", "--exclude-inbound-ports", "22"); !strings.Contains(out, "- nat: -A KUMA_MESH_INBOUND -p tcp -m tcp --dport 22") {
		t.Errorf("verify with another config should list the missing rule:\n%s", out)
	}
	if out := step(exitOK, "uninstall", "--dry-run"); !strings.Contains(out, "-X KUMA_MESH_OUTBOUND") || !strings.Contains(out, "-D OUTPUT -p tcp") {
		t.Errorf("uninstall --dry-run should print the removal:\n%s", out)
	}
	step(exitOK, "uninstall")
	// Nothing installed: said first, in one line, not as a list of every rule missing.
	if out := step(exitInvalid, "verify"); !strings.HasPrefix(out, "transparent proxy not installed: none of its") || strings.Contains(out, "- nat:") {
		t.Errorf("verify after uninstall should say it is not installed:\n%s", out)
	}
}

func TestTproxyCmdBools(t *testing.T) {
	cases := []struct {
		name         string
		env          map[string]string
		args         []string
		dns, ctZones bool
	}{
		{"defaults", nil, nil, true, true},
		{"--redirect-dns=false", nil, []string{"--redirect-dns=false"}, false, false},
		{"env off, flag on", map[string]string{"KUMA_TRANSPARENT_PROXY_REDIRECT_DNS": "false"}, []string{"--redirect-dns"}, true, true},
		{"env skip zones", map[string]string{"KUMA_TRANSPARENT_PROXY_SKIP_DNS_CONNTRACK_ZONE_SPLIT": "true"}, nil, true, false},
		{"flag skip zones", nil, []string{"--skip-dns-conntrack-zone-split"}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runTproxyTest(t, tc.env, append([]string{"install", "--dry-run", "--ip-family-mode", "ipv4"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if got := strings.Contains(out, "KUMA_MESH_DNS"); got != tc.dns {
				t.Errorf("DNS rules present = %v, want %v", got, tc.dns)
			}
			if got := strings.Contains(out, "CT --zone"); got != tc.ctZones {
				t.Errorf("conntrack zone rules present = %v, want %v", got, tc.ctZones)
			}
		})
	}
	if code, _, errs := runTproxyTest(t, map[string]string{"KUMA_TRANSPARENT_PROXY_REDIRECT_DNS": "maybe"}, "install", "--dry-run"); code != exitInvalid || !strings.Contains(errs, "KUMA_TRANSPARENT_PROXY_REDIRECT_DNS") {
		t.Errorf("a bad boolean in the environment: exit %d, %s", code, errs)
	}
}

// The examples of `kuma-dp tproxy --help`, run as written (sudo dropped, --netns added) in a
// network namespace, in order: each exits 0.
func TestTproxyHelpExamplesWork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables): run as root, as CI does")
	}
	if _, err := exec.LookPath("iptables-nft-restore"); err != nil {
		t.Skip("iptables not found: install the Debian package iptables")
	}
	ns := fmt.Sprintf("kdp-help-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, args := range [][]string{
		{"link", "add", "kdphelp0", "type", "veth", "peer", "name", "kdphelp1"},
		{"addr", "add", "10.98.0.1/24", "dev", "kdphelp0"},
		{"-6", "addr", "add", "fd6b:6470:98::1/64", "dev", "kdphelp0", "nodad"},
		{"link", "set", "kdphelp0", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	var help bytes.Buffer
	dispatch([]string{"tproxy", "--help"}, &help, &help)
	t.Chdir("../..") // the examples name testdata/ from the repository's root
	state := filepath.Join(t.TempDir(), "state.json")
	ran := 0
	for _, line := range strings.Split(help.String(), "\n") {
		line, _, _ = strings.Cut(strings.TrimSpace(line), " && ")
		env := map[string]string{}
		fields := strings.Fields(line)
		for len(fields) > 0 && (strings.Contains(fields[0], "=") || fields[0] == "sudo" || fields[0] == "-E") {
			if k, v, ok := strings.Cut(fields[0], "="); ok {
				env[k] = v
			}
			fields = fields[1:]
		}
		if len(fields) < 3 || fields[0] != "kuma-dp" || fields[1] != "tproxy" {
			continue
		}
		args := append(fields[2:], "--netns", ns, "--state-file", state)
		if code, out, errs := runTproxyTest(t, env, args...); code != exitOK {
			t.Fatalf("%s: exit %d\n%s\n%s", line, code, out, errs)
		}
		ran++
	}
	if ran != 5 {
		t.Fatalf("ran %d examples, want the 5 of the help", ran)
	}
	if code, _, errs := runTproxyTest(t, nil, "uninstall", "--netns", ns, "--state-file", state); code != exitOK {
		t.Fatal(errs)
	}
}
