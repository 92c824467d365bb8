package bootstrap

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kumadp/kuma-dp/xds"
)

// XDSClusterName is the static cluster through which Envoy reaches the agent's xDS server.
const XDSClusterName = "kuma-dp-xds"

// Config is what the bootstrap depends on.
type Config struct {
	// Mesh and Name identify the dataplane: the node id is "<mesh>.<name>".
	Mesh, Name string
	// Service is the dataplane's service (its first inbound's kuma.io/service): node cluster.
	Service string
	// XDSSocket is the agent's xDS unix socket.
	XDSSocket string
	// AdminSocket is the admin API's unix socket (e.g. <workdir>/envoy-admin.sock). Ignored
	// when AdminAddress is set.
	AdminSocket string
	// AdminAddress, when set, is a loopback "ip:port" for the admin API instead of the socket.
	AdminAddress string
}

func (c Config) check() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("bootstrap: name: required"))
	}
	if c.XDSSocket == "" {
		errs = append(errs, errors.New("bootstrap: xds socket: required"))
	}
	if c.AdminAddress == "" && c.AdminSocket == "" {
		errs = append(errs, errors.New("bootstrap: admin: a socket path or a loopback address is required"))
	}
	if c.AdminAddress == "" && c.AdminSocket != "" && c.XDSSocket != "" && filepath.Clean(c.AdminSocket) == filepath.Clean(c.XDSSocket) {
		// Envoy would bind its admin API where kuma-dp serves xDS and fail to start.
		errs = append(errs, fmt.Errorf("bootstrap: admin socket: the xds socket's path (value %q)", c.AdminSocket))
	}
	for _, p := range []struct{ field, path string }{{"xds socket", c.XDSSocket}, {"admin socket", c.AdminSocket}} {
		if len(p.path) > xds.MaxSocketPath {
			errs = append(errs, fmt.Errorf("bootstrap: %s: path is %d bytes, unix sockets allow %d (value %q)", p.field, len(p.path), xds.MaxSocketPath, p.path))
		}
	}
	return errors.Join(errs...)
}

// Build returns the Envoy v3 bootstrap for c, validated against Envoy's protos.
func Build(c Config) (*bootstrapv3.Bootstrap, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	mesh := c.Mesh
	if mesh == "" {
		mesh = "default"
	}
	admin, err := adminAddress(c)
	if err != nil {
		return nil, err
	}
	ads := &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
	h2, err := anypb.New(&httpopts.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{
		Node:  &core.Node{Id: mesh + "." + c.Name, Cluster: c.Service},
		Admin: &bootstrapv3.Admin{Address: admin},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &core.ApiConfigSource{
				ApiType:             core.ApiConfigSource_DELTA_GRPC,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName},
				}}},
				SetNodeOnFirstMessageOnly: true,
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*cluster.Cluster{{
			Name:                 XDSClusterName,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
			ConnectTimeout:       durationpb.New(time.Second),
			LoadAssignment: &endpoint.ClusterLoadAssignment{
				ClusterName: XDSClusterName,
				Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: []*endpoint.LbEndpoint{{
					HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
						Address: &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: c.XDSSocket}}},
					}},
				}}}},
			},
			// xDS is gRPC: HTTP/2 to the agent.
			TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2},
		}}},
		LayeredRuntime: runtimeLayers(),
	}
	if err := xds.ValidateMessage(b); err != nil {
		return nil, fmt.Errorf("bootstrap: invalid: %w", err)
	}
	return b, nil
}

// runtimeLayers are Envoy's runtime: what it has without a layered_runtime (a static layer,
// then the admin endpoint's, so /runtime_modify works), the static layer lifting Envoy's
// limit on a regex's RE2 program (100 instructions by default, under what routes commonly
// hold: ^/users/[a-z0-9-]{1,64}$ is 259), as Kuma's bootstrap does. A route's regexes are
// bounded when their TrafficRoute is read (package mesh, 32,768), where a regex over the
// bound is refused naming its field: the limit left in Envoy refused the listener, and with
// it every update of the agent's resources. Larger ones are logged by Envoy (warn_level).
func runtimeLayers() *bootstrapv3.LayeredRuntime {
	static, _ := structpb.NewStruct(map[string]any{
		"re2.max_program_size.error_level": float64(math.MaxUint32),
		"re2.max_program_size.warn_level":  float64(1000),
	})
	return &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{
		{Name: "kuma-dp", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: static}},
		{Name: "admin", LayerSpecifier: &bootstrapv3.RuntimeLayer_AdminLayer_{AdminLayer: &bootstrapv3.RuntimeLayer_AdminLayer{}}},
	}}
}

func adminAddress(c Config) (*core.Address, error) {
	if c.AdminAddress == "" {
		return &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: c.AdminSocket, Mode: 0o600}}}, nil
	}
	host, port, err := splitLoopback(c.AdminAddress)
	if err != nil {
		return nil, err
	}
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}, nil
}

// Write builds the bootstrap and writes it to path as JSON, readable only by its owner
// (it names the sockets that control Envoy). The file is replaced atomically.
func Write(path string, c Config) error {
	b, err := Build(c)
	if err != nil {
		return err
	}
	data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
	if err != nil {
		return fmt.Errorf("bootstrap: encoding: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bootstrap-*")
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("bootstrap: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("bootstrap: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bootstrap: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}
