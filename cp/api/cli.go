package api

import (
	"fmt"
	"io"
	"net/url"
	"strings"
)

// ParseType is the URL type a command line names: the plural (dataplanes), kumactl's
// singular for one resource (dataplane), a kind (Dataplane) or kumactl's hyphenated name
// (traffic-routes), in any case; false when it names none.
func ParseType(arg string) (string, bool) {
	t := strings.ToLower(strings.ReplaceAll(arg, "-", ""))
	if _, ok := Types[t]; ok {
		return t, true
	}
	for _, plural := range []string{t + "s", t + "es"} { // dataplane, mesh
		if _, ok := Types[plural]; ok {
			return plural, true
		}
	}
	return "", false
}

// Formats are get's -o values.
var Formats = []string{"table", "yaml", "json"}

// CheckFormat refuses an -o that get does not print ("" is the table).
func CheckFormat(format string) error {
	switch format {
	case "", "table", "yaml", "json":
		return nil
	}
	return fmt.Errorf("-o %q: want %s", format, strings.Join(Formats, ", "))
}

// CheckURL refuses an --api-url that is not http(s)://HOST[:PORT], naming it.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--api-url %q: want http://HOST:PORT or https://HOST:PORT (e.g. http://127.0.0.1:5681)", raw)
	}
	return nil
}

// PrintStatusAs writes GET /status's body (JSON) as -o asks: "key: value" lines (table,
// PrintStatus), or the body as JSON or YAML.
func PrintStatusAs(w io.Writer, format string, body io.Reader) error {
	if format == "" || format == "table" {
		return PrintStatus(w, body)
	}
	if err := CheckFormat(format); err != nil {
		return err
	}
	st, err := decodeStatus(body)
	if err != nil {
		return err
	}
	return printDoc(w, format, st)
}

// ErrWriter writes to W and keeps the first error (a full disk): a command checks once, at
// its end, that what it printed was written - printing a YAML document or a status line
// does not look at each write's error.
type ErrWriter struct {
	W   io.Writer
	Err error
}

func (e *ErrWriter) Write(p []byte) (int, error) {
	if e.Err != nil {
		return 0, e.Err
	}
	n, err := e.W.Write(p)
	if err != nil {
		e.Err = err
	}
	return n, err
}
