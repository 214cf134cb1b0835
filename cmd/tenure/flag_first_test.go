package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Flags with no command after them, or a command's own flag before the
// command, are named as such: not as an unknown command "--endpoints".
func TestFlagsWithoutCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoints", "127.0.0.1:1"}, "no command given (only flags: --endpoints 127.0.0.1:1)"},
		{[]string{"-o", "json", "--stale"}, "no command given (only flags: -o json --stale)"},
		{[]string{"--ttl", "3s", "acquire", "x"}, "--ttl before the command: give the command first, then its flags"},
		{[]string{"--holder=w1", "ls"}, "--holder=w1 before the command"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "unknown command") {
			t.Errorf("tenure %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(c.args, " "), code, stderr.String(), c.want)
		}
	}
}
