package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonCodec is Connect's JSON codec, except that it decodes strictly, as
// protojson does by default: an unknown enum name (API.md: unknown enum
// values are INVALID_ARGUMENT) and an unknown field are errors, not
// silently dropped. A misspelt field ("tll") would otherwise take its
// default without a word.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

// jsonUTF8Codec is jsonCodec for "application/json; charset=utf-8", the
// content type many HTTP clients send: Connect keys codecs by the name,
// parameter included, and would otherwise use its own there.
type jsonUTF8Codec struct{ jsonCodec }

func (jsonUTF8Codec) Name() string { return "json; charset=utf-8" }

// Marshal writes every field, zeros included (piece 0, a count of 0,
// false), so that a JSON client reads them like any value instead of
// finding them missing: proto3 JSON leaves zero values out. Enums are
// the exception: a zero enum is left out as before, since API.md has
// responses carry only explicit, non-zero enum values (a granted
// RequestLeases has no rejectedReason, an active lease no releaseReason).
// So are message fields (timestamps, durations) and optional fields that
// are not set: they have presence, and protojson writes zeros only of the
// fields that have none.
func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return MarshalJSON(pm)
}

// MarshalJSON is the JSON form the API answers with (and the CLI's -o
// json prints): every field, zeros included, except enums at zero and
// message and optional fields not set, on one line without spaces.
func MarshalJSON(pm proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(pm)
	if err != nil {
		return nil, err
	}
	if !hasZeroEnum(pm.ProtoReflect()) {
		// protojson adds random spaces between tokens (on purpose, so
		// that nobody depends on its layout): one stable form instead.
		var out bytes.Buffer
		if err := json.Compact(&out, b); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // int64s stay exact
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	dropZeroEnums(pm.ProtoReflect(), obj)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// wellKnown reports a google.protobuf type: its JSON form is its own
// (Timestamp, Duration, Struct), not a message's fields.
func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// zeroEnum reports a singular enum field without presence at zero.
func zeroEnum(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.EnumKind && fd.Cardinality() != protoreflect.Repeated &&
		!fd.HasPresence() && m.Get(fd).Enum() == 0
}

// eachMessage calls fn with every message held by m's fields (singular,
// repeated and map values), except well-known types, with the JSON name
// of the field and where in it the message is: nil for a singular field,
// the index (int) in a list, the key (string) in a map. It stops when fn
// returns false, and then returns false.
func eachMessage(m protoreflect.Message, fn func(name string, at any, sub protoreflect.Message) bool) bool {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			if vd := fd.MapValue(); vd.Kind() != protoreflect.MessageKind || wellKnown(vd.Message()) {
				continue
			}
			ok := true
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				ok = fn(fd.JSONName(), k.String(), v.Message())
				return ok
			})
			if !ok {
				return false
			}
		case fd.Kind() != protoreflect.MessageKind || wellKnown(fd.Message()):
		case fd.IsList():
			l := m.Get(fd).List()
			for j := range l.Len() {
				if !fn(fd.JSONName(), j, l.Get(j).Message()) {
					return false
				}
			}
		case m.Has(fd):
			if !fn(fd.JSONName(), nil, m.Get(fd).Message()) {
				return false
			}
		}
	}
	return true
}

// hasZeroEnum reports whether m or a message within holds a zero enum.
func hasZeroEnum(m protoreflect.Message) bool {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if zeroEnum(m, fields.Get(i)) {
			return true
		}
	}
	return !eachMessage(m, func(_ string, _ any, sub protoreflect.Message) bool { return !hasZeroEnum(sub) })
}

// dropZeroEnums deletes from obj, m's JSON object, its zero enums, at
// every depth.
func dropZeroEnums(m protoreflect.Message, obj map[string]any) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); zeroEnum(m, fd) {
			delete(obj, fd.JSONName())
		}
	}
	eachMessage(m, func(name string, at any, sub protoreflect.Message) bool {
		o := obj[name]
		switch at := at.(type) {
		case int:
			if l, ok := o.([]any); ok && at < len(l) {
				o = l[at]
			}
		case string:
			if mp, ok := o.(map[string]any); ok {
				o = mp[at]
			}
		}
		if so, ok := o.(map[string]any); ok {
			dropZeroEnums(sub, so)
		}
		return true
	})
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
