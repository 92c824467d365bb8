package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// Every flag line of every help shows the flag, at most one word for its value, then the
// description: a `quoted` word in a usage string is taken by pflag as the value's name, and
// once printed the vips flag as "--dns-ttl kuma-dp run --dns-ttl".
func TestHelpFlagLinesWellFormed(t *testing.T) {
	flagLine := regexp.MustCompile(`^\s+(-\w, )?--[\w-]+( [\w.]+)?( {2,}|$)`)
	for _, cmd := range [][]string{{"run", "--help"}, {"vips", "--help"}, {"tproxy", "--help"}} {
		var help bytes.Buffer
		dispatch(cmd, &help, &help)
		n, inFlags := 0, false
		for _, line := range strings.Split(help.String(), "\n") {
			switch {
			case strings.TrimSpace(line) == "Flags:":
				inFlags = true
				continue
			case strings.TrimSpace(line) == "":
				inFlags = false
			}
			if !inFlags {
				continue
			}
			n++
			if !flagLine.MatchString(line) {
				t.Errorf("%v: malformed flag line:\n%s", cmd, line)
			}
		}
		if n < 5 {
			t.Errorf("%v: only %d flag lines:\n%s", cmd, n, help.String())
		}
	}
}
