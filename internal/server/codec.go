package server

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is Connect's JSON codec, except that an unknown enum name is
// an error (API.md: unknown enum values are INVALID_ARGUMENT) instead of
// being silently dropped. Unknown fields are still tolerated, so clients
// built against a newer schema keep working.
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
	err := protojson.UnmarshalOptions{}.Unmarshal(b, pm)
	if err != nil && strings.Contains(err.Error(), "unknown field") {
		// Retry tolerating unknown fields. protojson would then also drop
		// unknown enum names, so only a message without them gets here.
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, pm)
	}
	if err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}
