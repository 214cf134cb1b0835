// Package ledger keeps Tenure's tamper-evident event log: every record is
// chained to its predecessor by SHA-256 and the chain head is signed with
// the registrar's Ed25519 key at checkpoints, so that an edited, reordered
// or truncated ledger is detected on replay or audit. Nodes keep the sealed
// records durably in append-only NDJSON files (Writer), which Verify checks
// offline (tenure audit verify).
package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
)

// Hash is a chain hash.
type Hash = [sha256.Size]byte

// Chain is the head of a hash chain: the index the next record takes and
// the hash of the last record.
type Chain struct {
	Next uint64
	Head Hash
	buf  scratch
}

// NewChain starts an empty chain whose first record has index 1.
func NewChain() Chain { return Chain{Next: 1} }

var marshal = proto.MarshalOptions{Deterministic: true}

// Seal gives rec the next index and its predecessor's hash, encodes it
// canonically (deterministic protobuf) and advances the chain. The record's
// hash is the SHA-256 of the returned bytes.
func (c *Chain) Seal(rec *logpb.Record) ([]byte, Hash, error) {
	rec.Index = c.Next
	// One allocation holds the previous hash and, after it, the encoding.
	buf := make([]byte, len(c.Head), len(c.Head)+192)
	copy(buf, c.Head[:])
	rec.PrevHash = buf[:len(c.Head):len(c.Head)]
	b, ok := appendRecord(buf[len(c.Head):len(c.Head)], &c.buf, rec)
	if !ok {
		var err error
		if b, err = marshal.Marshal(rec); err != nil {
			return nil, Hash{}, err
		}
	}
	h := sha256.Sum256(b)
	c.Next++
	c.Head = h
	return b, h, nil
}

// ErrBroken reports a ledger whose chain does not hold.
var ErrBroken = errors.New("ledger chain broken")

// BrokenError names the first record at which the chain fails.
type BrokenError struct {
	Index  uint64
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("LEDGER_CORRUPT: record %d: %s", e.Index, e.Reason)
}

func (e *BrokenError) Is(target error) bool { return target == ErrBroken }

// Follow checks that the encoded record b (decoded as rec) continues the
// chain, and advances it. It checks the index, the predecessor hash and,
// for checkpoints, the signature against pub (when pub is set).
func (c *Chain) Follow(rec *logpb.Record, b []byte, pub ed25519.PublicKey) (Hash, error) {
	if rec.Index != c.Next {
		return Hash{}, &BrokenError{Index: c.Next, Reason: fmt.Sprintf("expected index %d, found %d (missing or reordered records)", c.Next, rec.Index)}
	}
	if !bytes.Equal(rec.PrevHash, c.Head[:]) {
		return Hash{}, &BrokenError{Index: rec.Index, Reason: "previous-hash mismatch (a record before it was altered, removed or inserted)"}
	}
	if cp := rec.GetCheckpoint(); cp != nil && pub != nil {
		if cp.CoversIndex+1 != rec.Index || !bytes.Equal(cp.Head, c.Head[:]) {
			return Hash{}, &BrokenError{Index: rec.Index, Reason: "checkpoint does not cover the chain head before it"}
		}
		if !VerifyCheckpoint(pub, cp) {
			return Hash{}, &BrokenError{Index: rec.Index, Reason: "checkpoint signature does not verify"}
		}
	}
	h := sha256.Sum256(b)
	c.Next++
	c.Head = h
	return h, nil
}

// checkpointMessage is what a checkpoint signs: a domain string, the index
// of the last covered record and the chain head after it.
func checkpointMessage(index uint64, head []byte) []byte {
	m := make([]byte, 0, 64)
	m = append(m, "tenure.ledger.checkpoint.v1\x00"...)
	m = binary.BigEndian.AppendUint64(m, index)
	return append(m, head...)
}

// SignCheckpoint builds the checkpoint of the chain as it stands.
func (c *Chain) SignCheckpoint(priv ed25519.PrivateKey) *logpb.Checkpoint {
	head := c.Head
	return &logpb.Checkpoint{
		CoversIndex: c.Next - 1,
		Head:        head[:],
		Signature:   ed25519.Sign(priv, checkpointMessage(c.Next-1, head[:])),
	}
}

// VerifyCheckpoint checks a checkpoint's signature.
func VerifyCheckpoint(pub ed25519.PublicKey, cp *logpb.Checkpoint) bool {
	if len(pub) != ed25519.PublicKeySize || len(cp.Signature) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(pub, checkpointMessage(cp.CoversIndex, cp.Head), cp.Signature)
}
