// Package wire holds what the API's client and server share below the
// generated code: the binary codec.
package wire

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
)

// vtMessage is a message with generated fast-path encoding
// (protoc-gen-go-vtproto): every message of api/tenure/v1.
type vtMessage interface {
	proto.Message
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Codec is Connect's binary protobuf codec ("proto"), encoding the API's
// messages with their generated code instead of protobuf reflection
// (several times less CPU for the small messages of a busy stream) and
// any other message as Connect's own codec does.
type Codec struct{}

// Name is the codec's name in Content-Type: the binary protobuf one.
func (Codec) Name() string { return "proto" }

// Marshal encodes m.
func (c Codec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// Encoded is a message with its binary encoding, made once for a message
// sent many times (an event to every Watch stream): this codec sends the
// bytes, any other (JSON) encodes the message, which it embeds.
type Encoded struct {
	proto.Message
	Bytes []byte
}

// Encode returns m with its encoding.
func Encode(m proto.Message) (*Encoded, error) {
	b, err := Codec{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &Encoded{Message: m, Bytes: b}, nil
}

// MarshalAppend encodes m after b (Connect reuses its buffers).
func (Codec) MarshalAppend(b []byte, m any) ([]byte, error) {
	switch v := m.(type) {
	case *Encoded:
		return append(b, v.Bytes...), nil
	case vtMessage:
		n := v.SizeVT()
		b = grow(b, n)
		if _, err := v.MarshalToSizedBufferVT(b[len(b) : len(b)+n]); err != nil {
			return nil, err
		}
		return b[:len(b)+n], nil
	case proto.Message:
		return proto.MarshalOptions{}.MarshalAppend(b, v)
	}
	return nil, fmt.Errorf("%T is not a protobuf message", m)
}

// Unmarshal decodes b into m, replacing what m held.
func (Codec) Unmarshal(b []byte, m any) error {
	switch v := m.(type) {
	case vtMessage:
		proto.Reset(v)
		return v.UnmarshalVT(b)
	case proto.Message:
		return proto.Unmarshal(b, v)
	}
	return fmt.Errorf("%T is not a protobuf message", m)
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

// DecodeError is a protobuf decoder's error message without what the
// decoder puts before the problem: "unmarshal into *T: " (the Connect
// JSON codec) and "proto:", which protobuf-go follows with a space or, in
// some builds, a no-break space (so that nobody matches its messages;
// this only trims them).
func DecodeError(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "proto:"); ok {
		msg = strings.TrimLeft(after, " \u00a0")
	}
	return msg
}
