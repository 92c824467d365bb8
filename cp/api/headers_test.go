package api

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every table's header is one word a column, so that awk '{print $5}' finds the column
// it names (get routers had "REPLICAS (READY/ALL)").
func TestTableHeadersAreSingleWords(t *testing.T) {
	now := time.Now()
	tables := map[string]func(*bytes.Buffer) error{
		"get dataplanes":       func(b *bytes.Buffer) error { return Table(b, "dataplanes", nil, now) },
		"get virtualoutbounds": func(b *bytes.Buffer) error { return Table(b, "virtualoutbounds", nil, now) },
		"get routers":          func(b *bytes.Buffer) error { return PrintRouters(b, nil, nil) },
		"get routes":           func(b *bytes.Buffer) error { return PrintRoutes(b, nil, now) },
		"inspect dataplanes":   func(b *bytes.Buffer) error { return PrintInspectDataplanes(b, nil, nil, now) },
	}
	gap := regexp.MustCompile(`\s{2,}`)
	for name, print := range tables {
		var b bytes.Buffer
		if err := print(&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		header := strings.TrimSpace(strings.SplitN(b.String(), "\n", 2)[0])
		if cols, words := gap.Split(header, -1), strings.Fields(header); len(cols) != len(words) {
			t.Errorf("%s: header %q has a column of several words", name, header)
		}
	}
}
