package authdns

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
)

// WriteZone writes z in RFC 1035 master-file form: $ORIGIN and $TTL, then every record in
// transfer order. named-checkzone and nsd read it as it is.
func WriteZone(w io.Writer, z *Zone) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "$ORIGIN %s\n$TTL %d\n", z.Origin, z.TTL)
	for _, rr := range z.Records() {
		fmt.Fprintln(bw, rr.String())
	}
	return bw.Flush()
}

func fromBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
