package mesh

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// TestPolicyBombRefusedByValidation: the 1.1 KB policy that ran agents out of memory is
// refused by validation with the field named, and its message does not carry the value whole.
func TestPolicyBombRefusedByValidation(t *testing.T) {
	doc := "type: VirtualOutbound\nmesh: default\nname: bomb\nselectors:\n- match:\n    kuma.io/service: \"*\"\nconf:\n  host: '" +
		`{{$x := printf "%s" "ab"}}` + strings.Repeat(`{{$x = printf "%s%s" $x $x}}`, 32) + `{{$x}}.mesh` + "'\n  port: \"80\"\n  parameters:\n  - name: service\n    tagKey: kuma.io/service\n"
	var err error
	if a := testutil.HeapAllocated(func() { _, err = Decode("bomb.yaml", []byte(doc)) }); a > 16<<20 {
		t.Errorf("decoding and validating allocated %d bytes", a)
	}
	if err == nil || !strings.Contains(err.Error(), `virtualoutbound "bomb": conf.host`) {
		t.Fatalf("error %v, want the policy refused naming conf.host", err)
	}
	if len(err.Error()) > 6*errtext.MaxShown {
		t.Fatalf("error message is %d bytes: a refused value is never shown whole", len(err.Error()))
	}
}
