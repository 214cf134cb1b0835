package main

import (
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// state get prints a guarded state's data as it is only when a terminal
// shows it as text: an escape sequence written by the lease's holder is
// quoted, as in queue get, not sent to the reader's terminal.
func TestWriteStateQuotesControlCharacters(t *testing.T) {
	for _, c := range []struct {
		data, want string
	}{
		{"hello", "data   hello\n"},
		{`{"step":4}`, "data   {\"step\":4}\n"},
		{"a\x1b[2Jb", `data   "a\x1b[2Jb"` + "\n"},
		{"\x1b]0;pwned\x07", `data   "\x1b]0;pwned\a"` + "\n"},
		{"\xff\xfe", `data   "\xff\xfe"` + "\n"},
	} {
		var b strings.Builder
		if err := writeState(&b, &tenurev1.ReadStateResponse{Epoch: 3, Data: []byte(c.data)}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if !strings.HasPrefix(out, "epoch  3\n") || !strings.HasSuffix(out, c.want) {
			t.Errorf("state of %q printed as %q, want it to end with %q", c.data, out, c.want)
		}
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("state of %q printed a control character: %q", c.data, out)
		}
	}
}
