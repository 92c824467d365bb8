// Package errtext owns how an offending value appears in an error message: cut to a length
// that finds it in the file, never a whole multi-megabyte value in a log line; and, for an
// unknown name, the known one it likely misspells (Suggest).
package errtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxShown is how much of an offending value an error message shows.
const MaxShown = 200

// Clip returns s cut to at most n bytes (on a rune boundary), saying how long it was.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes in all)", s[:cut], len(s))
}

// List returns names joined by ", ", the first n of them and how many more there are: a log
// line or a message naming a few of many, never thousands.
func List(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
