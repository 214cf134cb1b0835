package cluster

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// decodeBatch decodes a log entry (logpb.Batch). Entries made only of the
// commands that fill nearly all of them (acquire without a derivation,
// release, renew) are decoded by hand, at a fraction of the cost of
// proto.Unmarshal, into the messages it would give; anything else
// (another command, an unknown or repeated op field, invalid UTF-8, a
// malformed entry) goes through proto.Unmarshal, so every replica decodes
// or refuses an entry alike. Tests compare the two on random entries.
func decodeBatch(data []byte) (*logpb.Batch, error) {
	if b, ok := decodeBatchFast(data); ok {
		return b, nil
	}
	b := &logpb.Batch{}
	if err := proto.Unmarshal(data, b); err != nil {
		return nil, err
	}
	return b, nil
}

// wireReader consumes protobuf fields; any irregularity clears ok, and
// the caller leaves the entry to proto.Unmarshal.
type wireReader struct {
	b  []byte
	ok bool
}

func (r *wireReader) more() bool { return r.ok && len(r.b) > 0 }

func (r *wireReader) tag() (protowire.Number, protowire.Type) {
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		r.ok = false
		return 0, 0
	}
	r.b = r.b[n:]
	return num, typ
}

func (r *wireReader) varint() uint64 {
	v, n := protowire.ConsumeVarint(r.b)
	if n < 0 {
		r.ok = false
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) bytes() []byte {
	v, n := protowire.ConsumeBytes(r.b)
	if n < 0 {
		r.ok = false
		return nil
	}
	r.b = r.b[n:]
	return v
}

// string reads a proto3 string field, which proto.Unmarshal requires to
// be valid UTF-8.
func (r *wireReader) string() string {
	v := r.bytes()
	if !utf8.Valid(v) {
		r.ok = false
		return ""
	}
	return string(v)
}

func decodeBatchFast(data []byte) (*logpb.Batch, bool) {
	// One pass to count the commands, so that they take one allocation.
	// The cluster tag, if any, comes last (as proto.Marshal writes it).
	n := 0
	var cluster []byte
	for r := (wireReader{b: data, ok: true}); r.more(); {
		num, typ := r.tag()
		if typ != protowire.BytesType || num != 1 && num != 2 || cluster != nil {
			return nil, false
		}
		if v := r.bytes(); num == 2 {
			cluster = v
		} else {
			n++
		}
		if !r.ok {
			return nil, false
		}
	}
	if n == 0 {
		return nil, false
	}
	cmds := make([]*logpb.Command, n)
	slab := make([]logpb.Command, n)
	r := wireReader{b: data, ok: true}
	actor := ""
	for i := range cmds {
		r.tag()
		c := &slab[i]
		if !decodeCommand(r.bytes(), c, actor) {
			return nil, false
		}
		cmds[i] = c
		actor = c.Actor
	}
	b := &logpb.Batch{Commands: cmds}
	if len(cluster) > 0 { // proto.Unmarshal leaves an empty one nil too
		b.Cluster = append([]byte(nil), cluster...)
	}
	return b, true
}

// The op of a command shares one allocation with its oneof wrapper.
type (
	acquireOp struct {
		op  logpb.Command_Acquire
		msg logpb.Acquire
	}
	renewOp struct {
		op  logpb.Command_Renew
		msg logpb.Renew
	}
	releaseOp struct {
		op  logpb.Command_Release
		msg logpb.Release
	}
)

// decodeCommand decodes b into c. prevActor is the actor of the command
// before, whose string c shares when it has the same (the usual case).
func decodeCommand(b []byte, c *logpb.Command, prevActor string) bool {
	r := wireReader{b: b, ok: true}
	for r.more() {
		num, typ := r.tag()
		switch {
		case num == 1 && typ == protowire.VarintType:
			c.Tick = int64(r.varint())
		case num == 2 && typ == protowire.VarintType:
			c.Wall = int64(r.varint())
		case num == 4 && typ == protowire.VarintType:
			// Every entry since rules were stamped has them: without this
			// case each one went to proto.Unmarshal.
			v := r.varint()
			if v > math.MaxUint32 {
				return false // proto would keep the low bits; leave it to proto
			}
			c.Rules = uint32(v)
		case num == 3 && typ == protowire.BytesType:
			if v := r.bytes(); r.ok && string(v) == prevActor {
				c.Actor = prevActor
			} else if r.ok && utf8.Valid(v) {
				c.Actor = string(v)
			} else {
				return false
			}
		case c.Op != nil || typ != protowire.BytesType:
			// A second op replaces or merges into the first: proto's call.
			return false
		case num == 11:
			x := &acquireOp{}
			if v := r.bytes(); !r.ok || !decodeAcquire(v, &x.msg) {
				return false
			}
			x.op.Acquire = &x.msg
			c.Op = &x.op
		case num == 12:
			x := &renewOp{}
			if v := r.bytes(); !r.ok || !decodeRenew(v, &x.msg) {
				return false
			}
			x.op.Renew = &x.msg
			c.Op = &x.op
		case num == 13:
			x := &releaseOp{}
			if v := r.bytes(); !r.ok || !decodeRelease(v, &x.msg) {
				return false
			}
			x.op.Release = &x.msg
			c.Op = &x.op
		default:
			return false
		}
	}
	return r.ok
}

func decodeAcquire(b []byte, a *logpb.Acquire) bool {
	r := wireReader{b: b, ok: true}
	for r.more() {
		switch num, typ := r.tag(); {
		case num == 1 && typ == protowire.BytesType:
			a.Namespace = r.string()
		case num == 2 && typ == protowire.BytesType:
			a.Resource = r.string()
		case num == 3 && typ == protowire.BytesType:
			a.Holder = r.string()
		case num == 4 && typ == protowire.VarintType:
			ttl := int64(r.varint())
			a.TtlMs = &ttl
		case num == 5 && typ == protowire.VarintType:
			a.Mode = tenurev1.Mode(int32(r.varint()))
		case num == 6 && typ == protowire.VarintType:
			a.WaitMs = int64(r.varint())
		default:
			// A derivation (rare), or a field this decoder does not know.
			return false
		}
	}
	return r.ok
}

func decodeRenew(b []byte, rn *logpb.Renew) bool {
	r := wireReader{b: b, ok: true}
	for r.more() {
		switch num, typ := r.tag(); {
		case num == 1 && typ == protowire.BytesType:
			rn.LeaseIds = append(rn.LeaseIds, r.string())
		case num == 2 && typ == protowire.BytesType:
			rn.Holder = r.string()
		case num == 3 && typ == protowire.VarintType:
			rn.AllOfHolder = protowire.DecodeBool(r.varint())
		case num == 4 && typ == protowire.BytesType:
			rn.Namespace = r.string()
		case num == 5 && typ == protowire.VarintType:
			ttl := int64(r.varint())
			rn.TtlMs = &ttl
		default:
			return false
		}
	}
	return r.ok
}

func decodeRelease(b []byte, rl *logpb.Release) bool {
	r := wireReader{b: b, ok: true}
	for r.more() {
		switch num, typ := r.tag(); {
		case num == 1 && typ == protowire.BytesType:
			rl.LeaseId = r.string()
		case num == 2 && typ == protowire.BytesType:
			rl.Holder = r.string()
		case num == 3 && typ == protowire.VarintType:
			rl.Reason = tenurev1.ReleaseReason(int32(r.varint()))
		default:
			return false
		}
	}
	return r.ok
}
