package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The README's first two lines are the two commands a newcomer runs: the first is `kuma-dp
// run --help`'s first example through `go run`, the second `make test`; the answer the README
// shows for httpbin.mesh is the VIP the bundled mesh gives it.
func TestREADMEStartsWithTheTwoCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(readme), "\n", 3)
	if len(lines) < 3 {
		t.Fatal("README has fewer than two lines")
	}
	var help bytes.Buffer
	dispatch([]string{"run", "--help"}, &help, &help)
	var example string
	for _, line := range strings.Split(help.String(), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "kuma-dp run ") && !strings.Contains(l, "[flags]") {
			example = l
			break
		}
	}
	if want := "go run ./cmd/" + example; example == "" || lines[0] != want {
		t.Errorf("README's first line is %q, want run's first help example through go run: %q", lines[0], want)
	}
	if lines[1] != "make test" {
		t.Errorf("README's second line is %q, want %q", lines[1], "make test")
	}
	m := regexp.MustCompile(`httpbin\.mesh\.\s+(\d+)\s+IN\s+A\s+(\S+)`).FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatal("README shows no answer for httpbin.mesh")
	}
	code, out, errOut := vipsCmd(t, "vips", "--dataplane-file", testDP, "--policies-dir", testPolicies, "-o", "json")
	if code != exitOK {
		t.Fatalf("vips: exit %d: %s", code, errOut)
	}
	var v vipsJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range v.Entries {
		if e.Hostname == "httpbin.mesh" && e.IPv4 != "" { // the entry that won the name
			found = true
			if e.IPv4 != m[2] {
				t.Errorf("README shows httpbin.mesh at %s; the bundled mesh gives %s", m[2], e.IPv4)
			}
		}
	}
	if !found {
		t.Error("the bundled mesh has no httpbin.mesh")
	}
	if m[1] != "30" {
		t.Errorf("README shows a TTL of %s; the resolver's default is 30", m[1])
	}
}

// The repository stands alone: its README, docs, code, tests and test data never point at
// design documents outside it (a sibling shared directory, the design files by number or by
// file name). The patterns are assembled so that this file does not match them itself.
func TestRepositoryStandsAlone(t *testing.T) {
	outside := []*regexp.Regexp{
		regexp.MustCompile(regexp.QuoteMeta(".." + "/shared")),
		regexp.MustCompile(`(?i)\bsee` + `d[ _-]?0{2}[0-9]`),
		regexp.MustCompile(`\b[0-9]{3}_[0-9a-f]{16}\.txt`),
		regexp.MustCompile(`\b(ARCHITECTURE|NOTES|STYLE|ROUTERS)\.md\b`),
	}
	root := "../.."
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		for _, p := range outside {
			if p.MatchString(rel) {
				t.Errorf("%s: its name points outside the repository", rel)
			}
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 || len(b) > 4<<20 {
			return nil // unreadable, binary or large: not prose
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			for _, p := range outside {
				if p.MatchString(line) {
					t.Errorf("%s:%d points outside the repository: %.200s", rel, i+1, line)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: not the repository", checked)
	}
}

// The README's vips sample is the command's real output: the lines `| head -N` keeps of
// what the command prints for the bundled mesh.
func TestREADMEVipsSampleIsRealOutput(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\$ go run ./cmd/kuma-dp (vips [^|\\n]*)\\| head -(\\d+)\\n(.*?)\\n```").FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatal("README has no `$ go run ./cmd/kuma-dp vips ... | head -N` sample")
	}
	args := strings.Fields(strings.NewReplacer("testdata/", "../../testdata/").Replace(m[1]))
	code, out, errOut := vipsCmd(t, args...)
	if code != exitOK {
		t.Fatalf("%s: exit %d: %s", m[1], code, errOut)
	}
	lines := strings.Split(out, "\n")
	n := len(strings.Split(m[3], "\n"))
	if want := strings.Join(lines[:n], "\n"); m[3] != want || m[2] != strconv.Itoa(n) {
		t.Errorf("README's vips sample (head -%s) is not the command's output:\n%s\nwant:\n%s", m[2], m[3], want)
	}
}
