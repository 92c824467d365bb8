package cplink

import (
	"errors"

	"github.com/kumadp/kuma-dp/mesh"
)

// defaultLoad reads the model when FilesConfig.Load is nil.
var defaultLoad = func(dataplaneFile, policiesDir string) (*mesh.Snapshot, error) {
	return nil, errors.New("files source: mesh.Load is not available in this build")
}
