package fanout

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// preEncoded is a response already in its wire form: a body shared by every stream that
// sends it (a table's whole content, encoded once per version) and a tail of the stream's
// own (its nonce). Protocol Buffers merges concatenated encodings of a message, so the two
// read as one DeltaDiscoveryResponse.
type preEncoded struct {
	shared, own []byte
}

// linkCodec is the link's gRPC codec: Protocol Buffers, except that a preEncoded response is
// written as it is, without copying the shared body (gRPC frees the buffers it is given, and
// a SliceBuffer's free is nothing, so the shared body stays the table's).
type linkCodec struct{ proto encoding.CodecV2 }

func newLinkCodec() linkCodec { return linkCodec{proto: encoding.GetCodecV2(proto.Name)} }

func (c linkCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*preEncoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(p.shared), mem.SliceBuffer(p.own)}, nil
	}
	return c.proto.Marshal(v)
}

func (c linkCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is the content subtype agents already speak.
func (linkCodec) Name() string { return proto.Name }
