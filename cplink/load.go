package cplink

import "github.com/kumadp/kuma-dp/mesh"

// defaultLoad reads the model when FilesConfig.Load is nil.
var defaultLoad = mesh.Load
