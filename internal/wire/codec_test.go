package wire

import (
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1" // also registers the API's files
)

// apiMessages lists every message of package tenure.v1, nested ones too.
func apiMessages(t *testing.T) []protoreflect.MessageType {
	t.Helper()
	var out []protoreflect.MessageType
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			if md.IsMapEntry() {
				continue
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				t.Fatalf("%s: %v", md.FullName(), err)
			}
			out = append(out, mt)
			walk(md.Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("tenure.v1", func(fd protoreflect.FileDescriptor) bool {
		walk(fd.Messages())
		return true
	})
	if len(out) < 50 {
		t.Fatalf("found only %d API messages", len(out))
	}
	return out
}

// TestEveryAPIMessageHasGeneratedEncoding: a message without it would
// silently take the slow path.
func TestEveryAPIMessageHasGeneratedEncoding(t *testing.T) {
	for _, mt := range apiMessages(t) {
		if _, ok := mt.New().Interface().(vtMessage); !ok {
			t.Errorf("%s has no generated encoding: run scripts/gen-proto.sh", mt.Descriptor().FullName())
		}
	}
}

// TestCodecMatchesProtobuf: for random values of every API message, the
// codec's bytes decode with protobuf-go to an equal message, protobuf-go's
// bytes decode with the codec to an equal message (replacing what the
// target held), and the sizes agree.
func TestCodecMatchesProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var c Codec
	for _, mt := range apiMessages(t) {
		for range 20 {
			m := mt.New()
			fill(r, m, 0)
			msg := m.Interface()
			b, err := c.Marshal(msg)
			if err != nil {
				t.Fatalf("%s: Marshal: %v", mt.Descriptor().FullName(), err)
			}
			if n := proto.Size(msg); n != len(b) {
				t.Fatalf("%s: %d bytes, protobuf-go's size %d", mt.Descriptor().FullName(), len(b), n)
			}
			back := mt.New().Interface()
			if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, msg) {
				t.Fatalf("%s: codec bytes decode by protobuf-go to %v (%v), want %v", mt.Descriptor().FullName(), back, err, msg)
			}
			pb, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			into := mt.New()
			fill(r, into, 0) // the codec must replace this
			if err := c.Unmarshal(pb, into.Interface()); err != nil || !proto.Equal(into.Interface(), msg) {
				t.Fatalf("%s: protobuf-go bytes decode by the codec to %v (%v), want %v", mt.Descriptor().FullName(), into, err, msg)
			}
			// Map entries come in any order, so compare decoded messages.
			appended, err := c.MarshalAppend([]byte("prefix"), msg)
			if err != nil || string(appended[:6]) != "prefix" {
				t.Fatalf("%s: MarshalAppend lost the prefix: %v", mt.Descriptor().FullName(), err)
			}
			back = mt.New().Interface()
			if err := proto.Unmarshal(appended[6:], back); err != nil || !proto.Equal(back, msg) {
				t.Fatalf("%s: MarshalAppend appended %v (%v), want %v", mt.Descriptor().FullName(), back, err, msg)
			}
		}
	}
}

// TestCodecRefusesInvalidUTF8: every string field, in every API message
// (singular, repeated, oneof member, map key and value), refuses invalid
// UTF-8 as protobuf-go does — API.md answers it with INVALID_ARGUMENT.
func TestCodecRefusesInvalidUTF8(t *testing.T) {
	bad := []byte("ok\xff\xfe")
	var c Codec
	checked := 0
	for _, mt := range apiMessages(t) {
		fields := mt.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			var b []byte
			switch {
			case fd.IsMap():
				var entry []byte
				for _, kv := range []protoreflect.FieldDescriptor{fd.MapKey(), fd.MapValue()} {
					if kv.Kind() == protoreflect.StringKind {
						entry = protowire.AppendTag(entry, kv.Number(), protowire.BytesType)
						entry = protowire.AppendBytes(entry, bad)
					}
				}
				if entry == nil {
					continue
				}
				b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
				b = protowire.AppendBytes(b, entry)
			case fd.Kind() == protoreflect.StringKind:
				b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
				b = protowire.AppendBytes(b, bad)
			default:
				continue
			}
			name := string(mt.Descriptor().FullName()) + "." + string(fd.Name())
			if err := proto.Unmarshal(b, mt.New().Interface()); err == nil {
				t.Fatalf("%s: protobuf-go accepted invalid UTF-8 (the test's bytes are wrong)", name)
			}
			if err := c.Unmarshal(b, mt.New().Interface()); err == nil || !strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("%s: the codec accepted invalid UTF-8 (%v)", name, err)
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d string fields", checked)
	}
}

// TestCodecOtherMessages: a message without generated encoding goes
// through protobuf-go; a value that is no message is an error.
func TestCodecOtherMessages(t *testing.T) {
	var c Codec
	in := &errdetails.ErrorInfo{Reason: "LEASE_HELD", Domain: "tenure", Metadata: map[string]string{"holder": "w1"}}
	b, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := &errdetails.ErrorInfo{}
	if err := c.Unmarshal(b, out); err != nil || !proto.Equal(in, out) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if _, err := c.Marshal("text"); err == nil {
		t.Fatal("Marshal of a string: no error")
	}
	if err := c.Unmarshal(b, new(string)); err == nil {
		t.Fatal("Unmarshal into a string: no error")
	}
}

// fill sets a random subset of m's fields to random values, nesting
// messages a few levels deep.
func fill(r *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if r.IntN(3) == 0 {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 1 + r.IntN(3) {
				if fd.Message() != nil {
					if depth >= 3 {
						break
					}
					e := l.NewElement()
					fill(r, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(r, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range 1 + r.IntN(3) {
				k := scalar(r, fd.MapKey()).MapKey()
				if fd.MapValue().Message() != nil {
					if depth >= 3 {
						break
					}
					v := mp.NewValue()
					fill(r, v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(r, fd.MapValue()))
				}
			}
		case fd.Message() != nil:
			if depth < 3 {
				fill(r, m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, scalar(r, fd))
		}
	}
}

func scalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()) >> r.IntN(32))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()) >> r.IntN(64))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32() >> r.IntN(32))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64() >> r.IntN(64))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(r.NormFloat64()))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.NormFloat64() * 1e6)
	case protoreflect.StringKind:
		words := []string{"", "a", "lease/1", "wörker", "日本", "🙂", strings.Repeat("x", 200)}
		return protoreflect.ValueOfString(words[r.IntN(len(words))] + words[r.IntN(len(words))])
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	case protoreflect.EnumKind:
		// Unknown numbers too: proto3 enums are open.
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(r.IntN(fd.Enum().Values().Len() + 2)))
	}
	panic("unhandled kind " + fd.Kind().String())
}

// TestAPIMessagesNotRecursive: the generated decoding has no depth limit
// (protobuf-go's is 10,000), which is safe only while no API message can
// contain itself: nesting is then bounded by the schema.
func TestAPIMessagesNotRecursive(t *testing.T) {
	var visit func(md protoreflect.MessageDescriptor, path []protoreflect.FullName)
	visit = func(md protoreflect.MessageDescriptor, path []protoreflect.FullName) {
		for _, p := range path {
			if p == md.FullName() {
				t.Fatalf("%s contains itself: %v", md.FullName(), append(path, md.FullName()))
			}
		}
		path = append(path, md.FullName())
		fields := md.Fields()
		for i := range fields.Len() {
			if sub := fields.Get(i).Message(); sub != nil {
				visit(sub, path)
			}
		}
	}
	for _, mt := range apiMessages(t) {
		visit(mt.Descriptor(), nil)
	}
}

// TestEncodedSendsItsBytes: an Encoded message goes out as the bytes made
// once, the same as its message's, and JSON still encodes the message.
func TestEncodedSendsItsBytes(t *testing.T) {
	m := &tenurev1.WatchResponse{Event: &tenurev1.Event{Index: 42, Type: "lease.issued", Namespace: "default", Resource: "orders/42"}}
	enc, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Codec{}.MarshalAppend([]byte("x"), enc)
	if err != nil || string(got) != "x"+string(want) {
		t.Fatalf("Encoded marshals to %x, want x then %x (%v)", got, want, err)
	}
	j1, err1 := protojson.Marshal(m)
	j2, err2 := protojson.Marshal(enc)
	if err1 != nil || err2 != nil || string(j1) != string(j2) {
		t.Fatalf("JSON of the Encoded %s (%v), of the message %s (%v)", j2, err2, j1, err1)
	}
}
