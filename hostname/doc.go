// Package hostname owns the hostname template engine: compiling and rendering a
// VirtualOutbound's host and port templates and a HostnameGenerator's template, in every
// syntax of the design documents and of Kuma, with bounded output; and whether a rendered
// name is a valid hostname.
//
// It never chooses what is rendered (vipalloc renders a template per tag tuple, mesh
// checks a policy's templates when it validates it), allocates addresses or reads resources.
package hostname

import "github.com/kumadp/kuma-dp/tagset"

// Tags are the tag values a template renders with (a mesh.Tags is one).
type Tags = tagset.Tags

// VirtualOutboundConf is what CompileVirtualOutbound compiles: a VirtualOutbound's conf
// (mesh.VirtualOutboundConf.Templates gives it).
type VirtualOutboundConf struct {
	Host, Port string
	// Tags maps a tag key to a template variable name (the VirtualOutbound design).
	Tags map[string]string
	// Parameters is Kuma's form of the same mapping.
	Parameters []Parameter
}

// Parameter is one {name, tagKey} of Kuma's conf.parameters.
type Parameter struct {
	Name   string
	TagKey string
}
