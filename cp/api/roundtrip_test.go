package api

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// Every Kuma form accepted (testdata/kuma/forms.yaml, Kuma 2.x's examples in testdata/kuma2,
// the bundled mesh's files), applied,
// comes back from get -o yaml as the document applied (the same fields and values; the
// internal form used to be stored and returned: a TrafficRoute's split as conf:
// [{destination, weight}], a HostnameGenerator's matchLabels as targetRef), on etcd and on a
// directory; the stored document is the one applied.
func TestKumaFormsRoundTrip(t *testing.T) {
	files := map[string][]byte{}
	for _, dir := range []string{"../../testdata/mesh/policies", "../../testdata/kuma", "../../testdata/kuma2/universal", "../../testdata/kuma2/kubernetes"} {
		paths, errs := mesh.ResourceFiles(dir)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p)] = bytes.ReplaceAll(data, []byte("NAME"), []byte("web-1"))
		}
	}
	_, _, onEtcd := startAPI(t)
	for store, cl := range map[string]*Client{"etcd": onEtcd, "dir": dirAPI(t, t.TempDir())} {
		t.Run(store, func(t *testing.T) {
			for name, data := range files {
				roundTrip(t, cl, name, data)
			}
		})
	}
}

// roundTrip applies a file and checks that get -o yaml of each of its resources gives the
// document applied, and that applying it again changes nothing.
func roundTrip(t *testing.T, cl *Client, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	applied, err := cl.Apply(ctx, name, data)
	if err != nil {
		t.Fatalf("%s: apply: %v", name, err)
	}
	docs, err := mesh.Documents(data)
	if err != nil || len(docs) != len(applied) {
		t.Fatalf("%s: %d documents (%v) for %d applied", name, len(docs), err, len(applied))
	}
	for i, a := range applied {
		r, err := cl.Get(ctx, a.Mesh, a.Type, a.Name)
		if err != nil {
			t.Fatalf("%s: get %s %s: %v", name, a.Type, a.Name, err)
		}
		var out bytes.Buffer
		if err := PrintOne(&out, "yaml", r, time.Now()); err != nil {
			t.Fatal(err)
		}
		want, err1 := mesh.DocumentJSON(docs[i])
		got, err2 := mesh.DocumentJSON(out.Bytes())
		if err1 != nil || err2 != nil || !bytes.Equal(canonJSON(got), canonJSON(want)) {
			t.Errorf("%s: %s %s: get -o yaml gives\n%s\nwant the document applied:\n%s%v%v", name, a.Type, a.Name, out.Bytes(), docs[i], nz(err1), nz(err2))
		}
	}
	again, err := cl.Apply(ctx, name, data)
	if err != nil {
		t.Fatalf("%s: apply again: %v", name, err)
	}
	for _, a := range again {
		if a.Result != "unchanged" {
			t.Errorf("%s: applied again: %s %s/%s %s", name, a.Type, a.Mesh, a.Name, a.Result)
		}
	}
}

func nz(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" (%v)", strings.TrimSpace(err.Error()))
}
