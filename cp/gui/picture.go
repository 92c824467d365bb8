package gui

import (
	"fmt"
	"strings"
)

// The router shards' picture (SVG, drawn by the page's template): a column per router, its
// header the router's name and DNS name, under it its replicas (ready or not) and then its
// routes (admitted or refused); the routes not scheduled in a column of their own. Each
// shape says in words what its colour says, for a screen reader and a tooltip.

const (
	colW    = 290
	colGap  = 24
	margin  = 12
	headH   = 52
	boxH    = 34
	boxGap  = 6
	labelH  = 22
	maxText = 38
)

// shape is one box of the picture.
type shape struct {
	X, Y, W, H int
	Label, Sub string
	Class      string // replica-ready, replica-down, route-ok, route-refused, route-pending
	Title      string
}

// caption is a column's section heading.
type caption struct {
	X, Y int
	Text string
}

type column struct {
	Head     shape
	Captions []caption
	Shapes   []shape
}

type picture struct {
	W, H    int
	Columns []column
	Summary string
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return s[:maxText-1] + "…"
}

// draw lays the routers out side by side.
func draw(routers []routerView, unscheduled []routeRow) picture {
	var p picture
	var words []string
	x := margin
	for _, rt := range routers {
		c := column{Head: shape{X: x, Y: margin, W: colW, H: headH, Label: clip(rt.Name), Sub: clip(rt.DNS), Class: "router",
			Title: fmt.Sprintf("router %s, DNS %s, %d of %d replicas ready, %d routes", rt.Name, rt.DNS, rt.Ready, len(rt.Replicas), len(rt.Routes))}}
		words = append(words, c.Head.Title)
		y := margin + headH + boxGap
		c.Captions = append(c.Captions, caption{x + 4, y + 15, fmt.Sprintf("replicas (%d ready of %d)", rt.Ready, len(rt.Replicas))})
		y += labelH
		for _, rep := range rt.Replicas {
			s := shape{X: x, Y: y, W: colW, H: boxH, Label: clip(rep.Name), Sub: "ready", Class: "replica-ready", Title: "replica " + rep.Name + " " + rep.Address + ": ready"}
			if !rep.Ready {
				s.Sub, s.Class, s.Title = clip("not ready: "+rep.Reason), "replica-down", "replica "+rep.Name+" "+rep.Address+": not ready: "+rep.Reason
			}
			c.Shapes = append(c.Shapes, s)
			y += boxH + boxGap
		}
		c.Captions = append(c.Captions, caption{x + 4, y + 15, fmt.Sprintf("routes (%d)", len(rt.Routes))})
		y += labelH
		for _, r := range rt.Routes {
			c.Shapes = append(c.Shapes, routeShape(x, y, r))
			y += boxH + boxGap
		}
		p.Columns = append(p.Columns, c)
		p.H = max(p.H, y)
		x += colW + colGap
	}
	if len(unscheduled) > 0 {
		c := column{Head: shape{X: x, Y: margin, W: colW, H: headH, Label: "not scheduled", Sub: fmt.Sprintf("%d routes", len(unscheduled)), Class: "router pending",
			Title: fmt.Sprintf("%d routes not scheduled on any router", len(unscheduled))}}
		words = append(words, c.Head.Title)
		y := margin + headH + boxGap
		for _, r := range unscheduled {
			c.Shapes = append(c.Shapes, routeShape(x, y, r))
			y += boxH + boxGap
		}
		p.Columns = append(p.Columns, c)
		p.H = max(p.H, y)
		x += colW + colGap
	}
	p.W = max(x-colGap+margin, 2*margin)
	p.H += margin
	p.Summary = strings.Join(words, "; ")
	if p.Summary == "" {
		p.Summary = "no router"
	}
	return p
}

func routeShape(x, y int, r routeRow) shape {
	s := shape{X: x, Y: y, W: colW, H: boxH, Label: clip(r.Namespace + "/" + r.Name + " " + r.Host), Class: "route-ok"}
	switch {
	case r.Admitted:
		s.Sub = clip(r.DNS)
	case r.Refused:
		s.Class, s.Sub = "route-refused", clip("refused: "+r.Admission)
	default:
		s.Class, s.Sub = "route-pending", clip(r.Phase+": "+r.Admission)
	}
	s.Title = fmt.Sprintf("route %s/%s host %s: %s, %s", r.Namespace, r.Name, r.Host, r.Phase, r.Admission)
	if r.DNS != "" {
		s.Title += ", DNS " + r.DNS
	}
	return s
}
