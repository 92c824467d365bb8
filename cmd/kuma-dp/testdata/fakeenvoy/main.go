// Command fakeenvoy stands in for Envoy in kuma-dp's end-to-end tests (no Envoy binary can be
// installed on the test machines). It does what the agent relies on, for real:
//   - `--version` prints Envoy's version line;
//   - reads the bootstrap given by --config-path (protojson, as Envoy does);
//   - serves the admin API on the bootstrap's admin unix socket (/ready: 503 until the
//     first clusters and listeners arrived, as Envoy's initialization does; POST
//     /healthcheck/fail);
//   - subscribes over delta ADS (gRPC on the bootstrap's xDS unix socket) to clusters and
//     listeners, ACKs every response, and appends what it received to $FAKE_ENVOY_REPORT
//     as JSON lines;
//   - exits 0 on SIGTERM (ignores it, as a stuck Envoy, with $FAKE_ENVOY_IGNORE_TERM set).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

const (
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
)

var (
	reportMu sync.Mutex
	report   = os.Getenv("FAKE_ENVOY_REPORT")

	initMu   sync.Mutex
	received = map[string]bool{} // type URL -> a first response arrived
)

func initialized() bool {
	initMu.Lock()
	defer initMu.Unlock()
	return received[clusterType] && received[listenerType]
}

// event is one line of the report.
type event struct {
	Event   string   `json:"event"`
	Type    string   `json:"type,omitempty"`
	Names   []string `json:"names,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Args    []string `json:"args,omitempty"`
	PID     int      `json:"pid,omitempty"`
}

func record(e event) {
	if report == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(e)
	f.Write(append(b, '\n'))
}

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println("envoy  version: 0123abcd/1.31.2/Clean/RELEASE/BoringSSL")
		return
	}
	configPath := ""
	for i, a := range args {
		if a == "--config-path" && i+1 < len(args) {
			configPath = args[i+1]
		}
	}
	if err := run(configPath, args); err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		os.Exit(1)
	}
}

func run(configPath string, args []string) error {
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(raw, &b); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	adminSock := b.GetAdmin().GetAddress().GetPipe().GetPath()
	xdsSock := b.GetStaticResources().GetClusters()[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath()
	if adminSock == "" || xdsSock == "" {
		return fmt.Errorf("bootstrap: no admin or xDS socket")
	}
	record(event{Event: "start", Args: args, PID: os.Getpid()})

	stopOn := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if os.Getenv("FAKE_ENVOY_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
		stopOn = stopOn[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopOn...)
	defer stop()

	os.Remove(adminSock)
	lis, err := net.Listen("unix", adminSock)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !initialized() {
			http.Error(w, "PRE_INITIALIZING", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "LIVE")
	})
	mux.HandleFunc("POST /healthcheck/fail", func(w http.ResponseWriter, _ *http.Request) {
		record(event{Event: "healthcheck-fail"})
		fmt.Fprintln(w, "OK")
	})
	go http.Serve(lis, mux)

	// Like Envoy, no 4 MiB cap on a response: 10,000 VIPs make large ones.
	conn, err := grpc.NewClient("unix://"+xdsSock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return err
	}
	defer conn.Close()
	go ads(ctx, conn, b.GetNode())
	<-ctx.Done()
	record(event{Event: "stop"})
	return nil
}

func ads(ctx context.Context, conn *grpc.ClientConn, node *core.Node) {
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		record(event{Event: "ads-error", Names: []string{err.Error()}})
		return
	}
	for _, t := range []string{clusterType, listenerType} {
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: t}); err != nil {
			return
		}
		node = nil // on the first message only, as the bootstrap asks
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				record(event{Event: "ads-error", Names: []string{err.Error()}})
			}
			return
		}
		var names []string
		for _, r := range resp.GetResources() {
			names = append(names, r.GetName())
		}
		record(event{Event: "update", Type: resp.GetTypeUrl(), Names: names, Removed: resp.GetRemovedResources()})
		initMu.Lock()
		received[resp.GetTypeUrl()] = true
		initMu.Unlock()
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return
		}
	}
}
