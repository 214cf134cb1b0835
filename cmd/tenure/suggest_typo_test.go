package main

import "testing"

// The commonest typos, two letters swapped or a flag in capitals, get the
// suggestion other typos get; words that are no typo of any still get none.
func TestSuggestionSwapsAndCase(t *testing.T) {
	for word, c := range map[string]struct {
		names []string
		want  string
	}{
		"wiat":          {[]string{"wait", "ttl", "hold"}, "wait"},
		"gte":           {[]string{"get", "put"}, "get"},
		"stauts":        {[]string{"status", "join", "remove"}, "status"},
		"TTL":           {[]string{"ttl", "wait"}, "ttl"},
		"acquier":       {[]string{"acquire", "release"}, "acquire"},
		"TENURE_MAXTTL": {[]string{"TENURE_MAX_TTL", "TENURE_DATA_DIR"}, "TENURE_MAX_TTL"},
		"to":            {[]string{"o", "ttl"}, ""},
		"xyz":           {[]string{"get", "put"}, ""},
		"relase":        {[]string{"acquire", "release", "renew"}, "release"},
	} {
		if got := suggestion(word, c.names); got != c.want {
			t.Errorf("suggestion(%q, %q) = %q, want %q", word, c.names, got, c.want)
		}
	}
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"ab", "ba", 1}, {"wiat", "wait", 1}, {"ca", "abc", 3}, {"kitten", "sitting", 3}, {"", "ls", 2}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
