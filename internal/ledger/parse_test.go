package ledger

import (
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestParseLineMatchesJSON: the fast path reads every line as
// encoding/json does, and refuses (falls back) where they could differ.
func TestParseLineMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var lines [][]byte
	for i := range 200 {
		rec := make([]byte, r.IntN(300))
		for j := range rec {
			rec[j] = byte(r.IntN(256))
		}
		prev := sha256.Sum256([]byte{byte(i)})
		lines = append(lines, appendRecordLine(nil, uint64(i*7919+1), prev[:], sha256.Sum256(rec), rec))
	}
	check := func(line []byte) {
		t.Helper()
		var fast, slow Entry
		ferr := parseLine(line, &fast)
		serr := json.Unmarshal(line, &slow)
		if (ferr == nil) != (serr == nil) || ferr == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("line %q:\nfast %+v %v\njson %+v %v", line, fast, ferr, slow, serr)
		}
	}
	for _, l := range lines {
		if !parseRecordLine(l, &Entry{}) {
			t.Fatalf("the fast path refused a line the Writer wrote: %q", l)
		}
		check(l)
		for range 50 { // mutations: any byte, anywhere
			m := append([]byte(nil), l...)
			switch r.IntN(3) {
			case 0:
				m[r.IntN(len(m))] = byte(r.IntN(256))
			case 1:
				const chars = "0123456789abcdefABCDEF+/=\"\\{}:,e-. "
				m[r.IntN(len(m))] = chars[r.IntN(len(chars))]
			default:
				i := r.IntN(len(m))
				m = append(m[:i], m[i+1:]...)
			}
			check(m)
		}
	}
}
