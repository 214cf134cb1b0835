package tenure

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Bitset is a set of piece indices in the wire form of the PoolService
// (API.md): plain bytes where piece i is bit i mod 8 of byte i div 8. Its
// length is the number of pieces it spans; Set grows it. The zero value is
// an empty set of length 0, ready to use.
type Bitset struct {
	n uint32
	b []byte
}

// NewBitset returns an empty set spanning n pieces.
func NewBitset(n uint32) Bitset {
	return Bitset{n: n, b: make([]byte, (uint64(n)+7)/8)}
}

// BitsetFromBytes returns the set whose wire form is b (copied); it spans
// len(b)·8 pieces.
func BitsetFromBytes(b []byte) Bitset {
	return Bitset{n: uint32(min(uint64(len(b))*8, 1<<32-1)), b: append([]byte(nil), b...)}
}

// BitsetFromBools returns the set of the indices i where have[i] is true;
// it spans len(have) pieces.
func BitsetFromBools(have []bool) Bitset {
	s := NewBitset(uint32(len(have)))
	for i, h := range have {
		if h {
			s.Set(uint32(i))
		}
	}
	return s
}

// FromRanges returns the set of the pieces in ranges (each [Start, End));
// it spans up to the largest End.
func FromRanges(ranges ...Range) Bitset {
	var s Bitset
	for _, r := range ranges {
		s.SetRange(r.Start, r.End)
	}
	return s
}

// grow makes the set span at least n pieces.
func (s *Bitset) grow(n uint32) {
	if n <= s.n {
		return
	}
	s.n = n
	if need := int((uint64(n) + 7) / 8); need > len(s.b) {
		s.b = append(s.b, make([]byte, need-len(s.b))...)
	}
}

// Set adds piece i, growing the set to span i+1 pieces when needed.
func (s *Bitset) Set(i uint32) {
	s.grow(i + 1)
	s.b[i/8] |= 1 << (i % 8)
}

// Clear removes piece i.
func (s *Bitset) Clear(i uint32) {
	if i < s.n {
		s.b[i/8] &^= 1 << (i % 8)
	}
}

// SetRange adds the pieces [start, end).
func (s *Bitset) SetRange(start, end uint32) {
	if end <= start {
		return
	}
	s.grow(end)
	for i := start; i < end; {
		if i%8 == 0 && end-i >= 8 {
			s.b[i/8] = 0xff
			i += 8
			continue
		}
		s.b[i/8] |= 1 << (i % 8)
		i++
	}
}

// Has reports whether piece i is in the set.
func (s Bitset) Has(i uint32) bool {
	return i < s.n && s.b[i/8]&(1<<(i%8)) != 0
}

// Len returns the number of pieces the set spans (not the number in it;
// see Count).
func (s Bitset) Len() uint32 { return s.n }

// Count returns the number of pieces in the set.
func (s Bitset) Count() int {
	n := 0
	for _, x := range s.b {
		n += bits.OnesCount8(x)
	}
	return n
}

// Bytes returns the wire form: (Len()+7)/8 bytes, piece i in bit i mod 8 of
// byte i div 8. The slice is a copy.
func (s Bitset) Bytes() []byte { return append([]byte(nil), s.b...) }

// wire is the wire form without trailing zero bytes (the same set, and
// never longer than the file's piece count allows).
func (s Bitset) wire() []byte {
	b := s.b
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// Ranges returns the set as sorted, disjoint, non-adjacent ranges.
func (s Bitset) Ranges() []Range {
	var out []Range
	for i := uint32(0); i < s.n; i++ {
		if !s.Has(i) {
			continue
		}
		j := i + 1
		for j < s.n && s.Has(j) {
			j++
		}
		out = append(out, Range{Start: i, End: j})
		i = j
	}
	return out
}

// String prints the set in ParseRanges' syntax ("0-9,12").
func (s Bitset) String() string { return FormatRanges(s.Ranges()) }

// Range is the pieces [Start, End) of a file.
type Range struct {
	Start, End uint32
}

// ParseRanges parses a comma-separated list of inclusive piece ranges:
// "0-99,200-299,512" is pieces 0 to 99, 200 to 299 and 512. The result is
// half-open: [0, 100), [200, 300), [512, 513).
func ParseRanges(s string) ([]Range, error) {
	var out []Range
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad piece range %q: want N or N-M", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 32); err != nil {
				return nil, fmt.Errorf("bad piece range %q: want N or N-M", part)
			}
		}
		if b < a {
			return nil, fmt.Errorf("bad piece range %q: end before start", part)
		}
		if b >= 1<<32-1 {
			return nil, fmt.Errorf("bad piece range %q: piece index too large", part)
		}
		out = append(out, Range{Start: uint32(a), End: uint32(b) + 1})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no piece ranges in %q", s)
	}
	return out, nil
}

// FormatRanges prints ranges in ParseRanges' syntax.
func FormatRanges(ranges []Range) string {
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		switch {
		case r.End <= r.Start:
		case r.End == r.Start+1:
			parts = append(parts, strconv.FormatUint(uint64(r.Start), 10))
		default:
			parts = append(parts, strconv.FormatUint(uint64(r.Start), 10)+"-"+strconv.FormatUint(uint64(r.End-1), 10))
		}
	}
	return strings.Join(parts, ",")
}
