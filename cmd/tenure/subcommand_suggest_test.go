package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// A typo of a subcommand gets the suggestion a typo of a command or a flag
// gets, and the list of subcommands there are; nothing is sent (the
// endpoint below listens nowhere).
func TestUnknownSubcommandSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "stauts"}, `unknown subcommand "stauts" (want status, join, remove, transfer-leader, snapshot, public-key or whoami); did you mean "status"?`},
		{[]string{"pool", "reqest", "p"}, `did you mean "request"?`},
		{[]string{"policy", "st", "ns"}, `unknown subcommand "st" (want get or set); did you mean "set"?`},
		{[]string{"queue", "psh", "q"}, `queue: unknown subcommand "psh" (want push, claim, complete, fail, cancel, retry, get, ls, stats, config or list); did you mean "push"?`},
		{[]string{"audit", "verfy", "--data-dir", "/nonexistent"}, `unknown subcommand "verfy" (want verify, export or prune); did you mean "verify"?`},
		{[]string{"backup", "sve", "f"}, `did you mean "save"?`},
		{[]string{"cert", "verfy"}, `unknown subcommand "verfy" (want verify); did you mean "verify"?`},
		{[]string{"fence", "chek", "r", "1"}, `unknown subcommand "chek" (want check); did you mean "check"?`},
		{[]string{"state", "pt", "r"}, `unknown subcommand "pt" (want get or put); did you mean "put"?`},
		{[]string{"fence", "bogus"}, `unknown subcommand "bogus" (want check)`},
	} {
		args := append(c.args, "--endpoints", "127.0.0.1:1")
		err := dispatch(context.Background(), args, io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("tenure %s: %v, want a usage error", strings.Join(c.args, " "), err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("tenure %s: %q, want it to say %q", strings.Join(c.args, " "), err, c.want)
		}
		if strings.Contains(c.want, "bogus") && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("tenure %s: %q suggests a subcommand for no typo", strings.Join(c.args, " "), err)
		}
	}
}
