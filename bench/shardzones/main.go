// Command shardzones serves router-shard zones (10 routers of 3 replicas, 1,000 user names)
// with the control plane's authoritative DNS (package authdns), or writes them as master
// files for a peer (nsd, CoreDNS file) to serve the same data: bench/shard-dns.sh.
//
//	shardzones -serve 127.0.0.1:5300        # serve until killed
//	shardzones -write DIR                   # DIR/<origin>.zone for every zone, and DIR/queries.txt
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/kumadp/kuma-dp/authdns"
)

func main() {
	serve := flag.String("serve", "", "address to serve the zones on (UDP and TCP)")
	write := flag.String("write", "", "directory to write the zones and a dnsperf query file into")
	flag.Parse()
	cat, problems := authdns.Build(authdns.SyntheticInput(10, 3, 1000), nil)
	if len(problems) > 0 {
		log.Fatal(problems)
	}
	switch {
	case *write != "":
		var q strings.Builder
		for _, z := range cat.Zones() {
			f, err := os.Create(filepath.Join(*write, strings.TrimSuffix(z.Origin, ".")+".zone"))
			if err != nil {
				log.Fatal(err)
			}
			if err := authdns.WriteZone(f, z); err != nil {
				log.Fatal(err)
			}
			f.Close()
		}
		for i := range 1000 { // half wildcard names, half user names (CNAME chased)
			fmt.Fprintf(&q, "svc%d-ns.shard%d.apps.example.com A\napp%d.users.test A\n", i, i%10, i)
		}
		if err := os.WriteFile(filepath.Join(*write, "queries.txt"), []byte(q.String()), 0o644); err != nil {
			log.Fatal(err)
		}
	case *serve != "":
		s, err := authdns.New(authdns.Config{Address: *serve})
		if err != nil {
			log.Fatal(err)
		}
		s.Swap(cat)
		log.Fatal(s.Run(context.Background()))
	default:
		flag.Usage()
		os.Exit(2)
	}
}
