package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The decoders refuse a string that is not UTF-8 without naming its
// field; API.md has the ErrorInfo name it. These find it again in a body
// that did not decode, as the path of proto field names from the request
// ("tasks.task_id"), or report false.

// badUTF8Proto finds the first string field of md in the wire data b that
// is not UTF-8.
func badUTF8Proto(md protoreflect.MessageDescriptor, b []byte) (string, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return string(fd.Name()), true
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if path, ok := badUTF8Proto(fd.Message(), v); ok {
				if fd.IsMap() { // the entry's key or value
					return string(fd.Name()), true
				}
				return string(fd.Name()) + "." + path, true
			}
		}
	}
	return "", false
}

// badUTF8JSON finds the first string of the JSON body b, key or value,
// that is not UTF-8 (encoding/json would quietly replace its bytes: the
// raw bytes of each token are checked), and names its field by md.
func badUTF8JSON(md protoreflect.MessageDescriptor, b []byte) (string, bool) {
	// A frame is an open object or array. An object knows its message
	// (nil for a map or an unknown field) and the field whose value is
	// being read; an array, the repeated field it holds.
	type frame struct {
		obj   bool
		md    protoreflect.MessageDescriptor
		field protoreflect.FieldDescriptor
		name  string // the field's name on the path ("": expecting a key)
	}
	var stack []frame
	path := func(last string) string {
		var parts []string
		for _, f := range stack {
			if f.obj && f.name != "" {
				parts = append(parts, f.name)
			}
		}
		if last != "" {
			parts = append(parts, last)
		}
		return strings.Join(parts, ".")
	}
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].name, stack[n-1].field = "", nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var prev int64
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		raw := b[prev:dec.InputOffset()]
		prev = dec.InputOffset()
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				child := frame{obj: true}
				switch {
				case top == nil:
					child.md = md
				case top.field != nil && top.field.Message() != nil && !top.field.IsMap():
					child.md = top.field.Message()
				}
				stack = append(stack, child)
			case '[':
				child := frame{}
				if top != nil {
					child.field = top.field
				}
				stack = append(stack, child)
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if top != nil && top.obj && top.name == "" { // a key
				name := t
				if top.md != nil {
					fd := top.md.Fields().ByJSONName(t)
					if fd == nil {
						fd = top.md.Fields().ByName(protoreflect.Name(t))
					}
					if fd != nil {
						name = string(fd.Name())
					}
					top.field = fd
				}
				if !utf8.Valid(raw) {
					return path(name), true
				}
				top.name = name
				continue
			}
			if !utf8.Valid(raw) {
				return path(""), true
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
