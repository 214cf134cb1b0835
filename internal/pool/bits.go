package pool

import (
	"encoding/binary"
	"fmt"
	mbits "math/bits"

	"github.com/RoaringBitmap/roaring/v2"
)

// denseWords converts plain bytes (piece i is bit i mod 8 of byte i div 8)
// to little-endian 64-bit words (piece i is bit i mod 64 of word i div 64).
func denseWords(bits []byte) []uint64 {
	w := make([]uint64, (len(bits)+7)/8)
	i := 0
	for ; i+8 <= len(bits); i += 8 {
		w[i/8] = binary.LittleEndian.Uint64(bits[i:])
	}
	for j := i; j < len(bits); j++ {
		w[i/8] |= uint64(bits[j]) << (8 * (j - i))
	}
	return w
}

// checkBits reports whether bits names only pieces below count. The
// error names the highest piece set, in the units of the caller's own
// ranges.
func checkBits(bits []byte, count uint32) error {
	top := -1 // the highest piece set
	for i := len(bits) - 1; i >= 0 && top < 0; i-- {
		if b := bits[i]; b != 0 {
			top = 8*i + mbits.Len8(b) - 1
		}
	}
	switch {
	case top >= int(count):
		return fmt.Errorf("names piece %d; the file has %d pieces (0 to %d)", top, count, int64(count)-1)
	case uint64(len(bits)) > (uint64(count)+7)/8:
		return fmt.Errorf("is %d bytes, longer than %d pieces need", len(bits), count)
	}
	return nil
}

func fromBits(bits []byte) *roaring.Bitmap {
	if len(bits) == 0 {
		return roaring.New()
	}
	return roaring.FromDense(denseWords(bits), false)
}

// encodeSet is the canonical encoding of a set: the portable roaring
// serialization of a bitmap rebuilt from its sorted members and
// run-optimized, so equal sets give equal bytes whatever their history.
// The empty set is nil.
func encodeSet(b *roaring.Bitmap) []byte {
	if b == nil || b.IsEmpty() {
		return nil
	}
	c := roaring.New()
	it := b.ManyIterator()
	buf := make([]uint32, 4096)
	for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
		c.AddMany(buf[:n])
	}
	c.RunOptimize()
	out, err := c.ToBytes()
	if err != nil {
		panic(fmt.Sprintf("pool: encoding a bitmap: %v", err))
	}
	return out
}

// decodeSet decodes encodeSet's bytes, refusing members at or above limit.
func decodeSet(b []byte, limit uint32) (*roaring.Bitmap, error) {
	bm := roaring.New()
	if len(b) == 0 {
		return bm, nil
	}
	if err := bm.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("bad bit set: %w", err)
	}
	if !bm.IsEmpty() && bm.Maximum() >= limit {
		return nil, fmt.Errorf("bit set names piece %d of %d", bm.Maximum(), limit)
	}
	return bm, nil
}
