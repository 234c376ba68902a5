package agentgate

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// rawMessage is a request or an answer as its bytes: the gate decodes a copy to decide and
// forwards the bytes as they came.
type rawMessage []byte

// rawCodec passes messages through as their bytes, on the server side and to the upstream.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case rawMessage:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case *rawMessage:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("agentgate: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("agentgate: cannot unmarshal into %T", v)
	}
	*m = data.Materialize()
	return nil
}
