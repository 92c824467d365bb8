package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Every package of the module (bench commands aside: the bench/ row covers them) is named in
// the README's Layout table, so a newcomer finds any behaviour in one hop from it.
func TestREADMELayoutNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "## Layout")
	end := strings.Index(text[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("README has no Layout section")
	}
	layout := text[start : start+1+end]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9/-]+)`").FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/kumadp/kuma-dp/"
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module)
		if strings.HasPrefix(rel, "bench/") {
			continue
		}
		n++
		if !named[rel] {
			t.Errorf("package %s is not named in the README's Layout table", rel)
		}
	}
	if n < 20 {
		t.Errorf("only %d packages listed by go list: %s", n, out)
	}
}
