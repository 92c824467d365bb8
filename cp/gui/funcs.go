package gui

import (
	"html/template"
	"net/url"
)

// pageNames are the pages, each a template of its own beside the layout.
var pageNames = []string{"overview", "dataplanes", "dataplane", "policies", "routers", "zones", "error"}

var funcs = template.FuncMap{
	"path":        pathOf,
	"policyCount": policyCount,
	"add": func(ns ...int) int {
		sum := 0
		for _, n := range ns {
			sum += n
		}
		return sum
	},
}

// parsePages parses every page with the layout; a template that does not parse is a bug
// of the binary, found by any test.
func parsePages() map[string]*template.Template {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}

func escapePart(s string) string { return url.PathEscape(s) }
