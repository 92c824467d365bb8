package api

import (
	"strings"
	"testing"
)

func TestParseType(t *testing.T) {
	for arg, want := range map[string]string{
		"dataplanes": "dataplanes", "dataplane": "dataplanes", "Dataplane": "dataplanes",
		"traffic-routes": "trafficroutes", "traffic-route": "trafficroutes", "TrafficRoute": "trafficroutes",
		"route": "routes", "routes": "routes", "router": "routers", "routebinding": "routebindings",
		"virtual-outbound": "virtualoutbounds", "meshexternalservice": "meshexternalservices",
		"meshes": "meshes", "mesh": "meshes", "Mesh": "meshes", "meshs": "", "status": "", "": "", "s": "", "dataplaness": "",
	} {
		got, ok := ParseType(arg)
		if got != want || ok != (want != "") {
			t.Errorf("ParseType(%q) = %q, %v; want %q", arg, got, ok, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"http://127.0.0.1:5681": true, "https://cp.example.com": true, "http://[::1]:5681/": true,
		"127.0.0.1:5681": false, "ftp://x": false, "http://": false, "": false, "localhost": false,
	} {
		if err := CheckURL(raw); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--api-url")) {
			t.Errorf("CheckURL(%q) = %v, want ok %v", raw, err, ok)
		}
	}
}

// get status -o yaml|json prints the body in that format, the revision as the integer it is.
func TestPrintStatusAs(t *testing.T) {
	body := `{"store":"etcd","storeRevision":1795686293903036,"isLeader":true}`
	for format, want := range map[string]string{
		"yaml":  "isLeader: true\nstore: etcd\nstoreRevision: 1795686293903036\n",
		"json":  "{\n  \"isLeader\": true,\n  \"store\": \"etcd\",\n  \"storeRevision\": 1795686293903036\n}\n",
		"table": "store:         etcd\nisLeader:      true\nstoreRevision: 1795686293903036\n",
	} {
		var b strings.Builder
		if err := PrintStatusAs(&b, format, strings.NewReader(body)); err != nil || b.String() != want {
			t.Errorf("-o %s: %q %v\nwant %q", format, b.String(), err, want)
		}
	}
	if err := PrintStatusAs(&strings.Builder{}, "wide", strings.NewReader(body)); err == nil || !strings.Contains(err.Error(), `-o "wide"`) {
		t.Errorf("-o wide: %v", err)
	}
}
