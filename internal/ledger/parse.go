package ledger

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// parseLine decodes one ledger line. Lines in the layout the Writer
// produces take a fast path (verifying a large ledger is mostly
// decoding); anything else goes through encoding/json, so that a line
// re-formatted by some tool still reads the same.
func parseLine(b []byte, e *Entry) error {
	if parseRecordLine(b, e) {
		return nil
	}
	*e = Entry{}
	return json.Unmarshal(b, e)
}

// parseRecordLine reads exactly
// {"index":N,"prev":"<hex>","hash":"<hex>","record":"<base64>"}\n
// and reports false for anything else.
func parseRecordLine(b []byte, e *Entry) bool {
	b, ok := bytes.CutPrefix(b, []byte(`{"index":`))
	if !ok {
		return false
	}
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || b[0] == '0' {
		return false
	}
	idx, err := strconv.ParseUint(string(b[:i]), 10, 64)
	if err != nil {
		return false
	}
	b = b[i:]
	var prev, hash, rec []byte
	if b, prev, ok = field(b, `,"prev":"`, isHex); !ok {
		return false
	}
	if b, hash, ok = field(b, `","hash":"`, isHex); !ok {
		return false
	}
	if b, rec, ok = field(b, `","record":"`, isBase64); !ok {
		return false
	}
	if !bytes.Equal(b, []byte("\"}\n")) && !bytes.Equal(b, []byte(`"}`)) {
		return false
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(rec)))
	n, err := base64.StdEncoding.Decode(raw, rec)
	if err != nil {
		return false
	}
	*e = Entry{Index: idx, Prev: string(prev), Hash: string(hash), Record: raw[:n]}
	return true
}

// field cuts prefix, then the longest run of bytes in set.
func field(b []byte, prefix string, set *[256]bool) (rest, val []byte, found bool) {
	b, found = bytes.CutPrefix(b, []byte(prefix))
	if !found {
		return nil, nil, false
	}
	i := 0
	for i < len(b) && set[b[i]] {
		i++
	}
	return b[i:], b[:i], true
}

// isHex and isBase64 are the bytes of lowercase hex and of standard
// base64 with padding.
var isHex, isBase64 = byteSet("0123456789abcdef"), byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")

func byteSet(chars string) *[256]bool {
	var s [256]bool
	for i := range len(chars) {
		s[chars[i]] = true
	}
	return &s
}
