package pool

import (
	"strings"
	"testing"
)

// A have-map or want bit set past the file names the piece at fault, in
// pieces (what a caller's ranges are in), not only in bytes.
func TestCheckBitsNamesThePiece(t *testing.T) {
	for _, c := range []struct {
		bits  []byte
		count uint32
		want  string // "" for no error
	}{
		{[]byte{0xff, 0x03}, 10, ""},
		{[]byte{0xff, 0x07}, 10, "names piece 10; the file has 10 pieces (0 to 9)"},
		{append(make([]byte, 250), 0x02), 1000, "names piece 2001; the file has 1000 pieces (0 to 999)"},
		{[]byte{0x01, 0x00, 0x00}, 10, "is 3 bytes, longer than 10 pieces need"},
		{nil, 10, ""},
		{[]byte{0x80}, 8, ""},
	} {
		err := checkBits(c.bits, c.count)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkBits(%x, %d) = %v, want %q", c.bits, c.count, err, c.want)
		}
	}
}
