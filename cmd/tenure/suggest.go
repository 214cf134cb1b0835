package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// suggestion returns the candidate closest to word, if one is close enough
// to be what was meant (a typo: at most two edits, fewer for short words;
// swapping two neighbouring letters is one, and case does not count),
// else "".
func suggestion(word string, candidates []string) string {
	best, bestD := "", 3
	if len(word) <= 4 {
		bestD = 2
	}
	for _, c := range candidates {
		// d < len(c): a word that shares no letter with c in place is no
		// typo of it ("to" is not "o").
		if d := editDistance(strings.ToLower(word), strings.ToLower(c)); d < bestD && d < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

// unknownSubcommand is the usage message for a subcommand that does not
// exist: the ones that do, and the one a typo of it meant ("cluster stauts":
// did you mean "status"?), as for commands and flags.
func unknownSubcommand(sub string, subs ...string) string {
	want := subs[len(subs)-1]
	if len(subs) > 1 {
		want = strings.Join(subs[:len(subs)-1], ", ") + " or " + want
	}
	msg := fmt.Sprintf("unknown subcommand %q (want %s)", sub, want)
	if s := suggestion(sub, subs); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return msg
}

// editDistance is the number of edits between a and b (bytes): insertions,
// deletions, substitutions and swaps of two neighbouring letters ("wiat"
// for "wait", "gte" for "get"), each counting one (the optimal string
// alignment distance).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1) // row i-2
	prev := make([]int, len(b)+1)  // row i-1
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// explainFlagError adds to an error of fs.Parse what a user needs next:
// the flag meant by an unknown one, or the unit a duration needs.
func explainFlagError(fs *flag.FlagSet, err error) string {
	msg := dashes(err.Error())
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := suggestion(name, names); s != "" {
			return msg + "; did you mean --" + s + "?"
		}
		return msg
	}
	// invalid value "5" for flag -ttl: …
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if _, after, ok := strings.Cut(rest, " for flag --"); ok {
			name, _, _ := strings.Cut(after, ":")
			if f := fs.Lookup(name); f != nil {
				if g, ok := f.Value.(flag.Getter); ok {
					if _, isDuration := g.Get().(time.Duration); isDuration {
						return msg + " (a duration takes a unit: 500ms, 30s, 5m, 2h)"
					}
				}
			}
		}
	}
	return msg
}

// dashes spells the flag a message of the flag package names as the
// documentation does: --ttl, not -ttl (a one-letter flag keeps one dash).
func dashes(msg string) string {
	return flagInMessage.ReplaceAllString(msg, "$1--$2")
}

var flagInMessage = regexp.MustCompile(`(not defined: |for flag |needs an argument: )-(\w\w)`)
