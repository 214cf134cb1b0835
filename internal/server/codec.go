package server

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is Connect's JSON codec, except that it decodes strictly, as
// protojson does by default: an unknown enum name (API.md: unknown enum
// values are INVALID_ARGUMENT) and an unknown field are errors, not
// silently dropped. A misspelt field ("tll") would otherwise take its
// default without a word.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (jsonCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := protojson.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}
