package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `{"tokens":[
 {"token":"tok-holder-1","principal":"w1","roles":["holder"],"namespaces":["default"]},
 {"token":"tok-holder-1b","principal":"w1","roles":["holder"],"namespaces":["default"]},
 {"token":"tok-reader","principal":"r1","roles":["reader","worker"],"namespaces":["team-*"],"rate":5,"burst":2},
 {"token":"tok-admin==","principal":"root","roles":["admin"],"namespaces":["*"]},
 {"principal":"svc.example.com","roles":["worker"],"namespaces":["jobs"]}
]}`

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStoreAuthenticates(t *testing.T) {
	t.Parallel()
	s, err := Open(writeFile(t, sample), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, principal string
		ok               bool
	}{
		{"tok-holder-1", "w1", true},
		{"tok-holder-1b", "w1", true},
		{"tok-admin==", "root", true},
		{"tok-holder-", "", false},
		{"tok-holder-11", "", false},
		{"", "", false},
		{"TOK-HOLDER-1", "", false},
	} {
		p, ok := s.Token(tc.token)
		if ok != tc.ok || ok && p.Name != tc.principal {
			t.Errorf("Token(%q) = %v, %v; want %q, %v", tc.token, p, ok, tc.principal, tc.ok)
		}
	}
	if p := s.Certificate("svc.example.com"); !p.Has(RoleWorker) || !p.InNamespace("jobs") || p.InNamespace("default") {
		t.Errorf("certificate principal = %+v", p)
	}
	if p := s.Certificate("stranger"); len(p.Roles) != 0 || p.InNamespace("default") {
		t.Errorf("unknown certificate principal has rights: %+v", p)
	}
	// Two tokens of one principal share its bucket.
	a, _ := s.Token("tok-holder-1")
	b, _ := s.Token("tok-holder-1b")
	if a.Limiter() != b.Limiter() {
		t.Error("tokens of one principal have separate limiters")
	}
}

func TestRolesAndNamespaces(t *testing.T) {
	t.Parallel()
	s, err := Open(writeFile(t, sample), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.Token("tok-reader")
	admin, _ := s.Token("tok-admin==")
	holder, _ := s.Token("tok-holder-1")
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"reader is reader", r.Has(RoleReader), true},
		{"reader is not holder", r.Has(RoleHolder), false},
		{"reader is not admin", r.Admin(), false},
		{"admin has every role", admin.Has(RoleHolder) && admin.Has(RoleWorker) && admin.Has(RoleReader), true},
		{"prefix pattern matches", r.InNamespace("team-a"), true},
		{"prefix pattern matches the bare prefix", r.InNamespace("team-"), true},
		{"prefix pattern does not match others", r.InNamespace("team"), false},
		{"empty namespace is default", holder.InNamespace(""), true},
		{"exact pattern is exact", holder.InNamespace("default2"), false},
		{"star matches all", admin.InNamespace("anything") && admin.AllNamespaces(), true},
		{"HasAny", holder.HasAny(RoleReader, RoleHolder), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v", tc.name, tc.got)
		}
	}
}

func TestParseFileRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		{"not json", `{"tokens":[`, "invalid JSON"},
		{"no tokens", `{}`, `missing "tokens"`},
		{"unknown field", `{"tokens":[],"extra":1}`, "unknown field"},
		{"unknown entry field", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"]},{"token":"abcdefgi","principal":"q","role":["holder"],"namespaces":["a"]}]}`, `tokens[1]: json: unknown field "role"`},
		{"entry field type", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":"holder","namespaces":["a"]}]}`, `tokens[0]: field "roles": wrong type string`},
		{"entry not an object", `{"tokens":["abcdefgh"]}`, "tokens[0]: expected an object, found a string"},
		{"trailing data", `{"tokens":[]} {}`, "after the JSON object"},
		{"no principal", `{"tokens":[{"token":"abcdefgh","roles":["holder"],"namespaces":["a"]}]}`, "principal is empty"},
		{"unknown role", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["root"],"namespaces":["a"]}]}`, `unknown role "root"`},
		{"no roles", `{"tokens":[{"token":"abcdefgh","principal":"p","namespaces":["a"]}]}`, "roles"},
		{"no namespaces", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"]}]}`, "namespaces"},
		{"star inside", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a*b"]}]}`, "only allowed at the end"},
		{"bad token chars", `{"tokens":[{"token":"has space","principal":"p","roles":["holder"],"namespaces":["a"]}]}`, "token: may only contain"},
		{"duplicate token", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"]},{"token":"abcdefgh","principal":"q","roles":["holder"],"namespaces":["a"]}]}`, "same token as tokens[0]"},
		{"negative rate", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"],"rate":-1}]}`, "rate"},
		{"burst without rate", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"],"burst":3}]}`, "burst needs a rate"},
		{"control char", `{"tokens":[{"token":"abcdefgh","principal":"p\u0001","roles":["holder"],"namespaces":["a"]}]}`, "control character"},
		{"bad expires", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"],"expires":"tomorrow"}]}`, "expires: \"tomorrow\" is not an RFC 3339 time"},
		{"certificate expires", `{"tokens":[{"principal":"p","roles":["holder"],"namespaces":["a"],"expires":"2030-01-01T00:00:00Z"}]}`, "only a token expires"},
		{"rates disagree", `{"tokens":[{"token":"abcdefgh","principal":"p","roles":["holder"],"namespaces":["a"],"rate":1},{"token":"abcdefgi","principal":"p","roles":["holder"],"namespaces":["a"]}]}`, "rate/burst differ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseFile: %v; want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "abcdefgh") || strings.Contains(err.Error(), "has space") {
				t.Errorf("error quotes a token: %v", err)
			}
		})
	}
}

func TestReloadSwapsAndKeepsOldOnError(t *testing.T) {
	t.Parallel()
	path := writeFile(t, sample)
	s, err := Open(path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"new-token","principal":"w2","roles":["reader"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Token("tok-holder-1"); ok {
		t.Error("a token removed from the file still authenticates after Reload")
	}
	if p, ok := s.Token("new-token"); !ok || p.Name != "w2" {
		t.Errorf("new token: %v %v", p, ok)
	}
	if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"x y"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload accepted an invalid file")
	}
	if _, ok := s.Token("new-token"); !ok {
		t.Error("a failed Reload dropped the table in force")
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	s, err := Open(writeFile(t, sample), Limits{Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.Token("tok-reader")
	l := r.Limiter()
	if l.Rate() != 5 || l.Burst() != 2 {
		t.Fatalf("reader limiter = %v/%v, want the entry's 5/s burst 2", l.Rate(), l.Burst())
	}
	now := time.Unix(1000, 0)
	for i := range 2 {
		if !l.Allow(now, 1) {
			t.Fatalf("request %d of the burst of 2 refused", i+1)
		}
	}
	if l.Allow(now, 1) {
		t.Fatal("third request within the same instant allowed past the burst")
	}
	if !l.Allow(now.Add(200*time.Millisecond), 1) {
		t.Fatal("a token did not come back after 1/rate")
	}
	h, _ := s.Token("tok-holder-1")
	if h.Limiter().Rate() != 100 || h.Limiter().Burst() != 100 {
		t.Errorf("default limits = %v/%v", h.Limiter().Rate(), h.Limiter().Burst())
	}
	// An unchanged principal keeps its (drained) bucket across Reload.
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	r2, _ := s.Token("tok-reader")
	if r2.Limiter() != l {
		t.Error("Reload replaced an unchanged principal's bucket")
	}
	// A certificate principal no entry names gets the default budget,
	// the same one on every request (found from outside: unlimited).
	st := s.Certificate("stranger")
	if st.Limiter() == nil || st.Limiter().Rate() != 100 || s.Certificate("stranger").Limiter() != st.Limiter() ||
		s.Certificate("other stranger").Limiter() == st.Limiter() {
		t.Errorf("stranger's limiter %v", st.Limiter())
	}
	unl, err := Open(writeFile(t, sample), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := unl.Token("tok-holder-1"); h.Limiter() != nil {
		t.Error("no default rate, but a limiter")
	}
	if unl.Certificate("stranger").Limiter() != nil {
		t.Error("no default rate, but a stranger's limiter")
	}
}

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, token string
		ok        bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER   abc.def~_-+/==", "abc.def~_-+/==", true},
		{"  Bearer abc  ", "abc", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearer a b", "", false},
		{"Bearer =abc", "", false},
		{"Bearer ab=c", "", false},
		{"Bearerabc", "", false},
	} {
		got, err := ParseAuthorization(tc.in)
		if (err == nil) != tc.ok || got != tc.token {
			t.Errorf("ParseAuthorization(%q) = %q, %v", tc.in, got, err)
		}
	}
	if _, err := ParseAuthorization(""); err != ErrNoCredentials {
		t.Errorf("empty header: %v, want ErrNoCredentials", err)
	}
}

// BenchmarkToken measures authenticating one bearer token (digest,
// lookup, constant-time confirmation) in a file of 1,000 tokens.
func BenchmarkToken(b *testing.B) {
	f := &File{}
	for i := range 1000 {
		f.Tokens = append(f.Tokens, FileEntry{Token: fmt.Sprintf("token-%04d-abcdefghijklmnopqrstuvwxyz", i),
			Principal: fmt.Sprintf("p%d", i), Roles: []string{"holder"}, Namespaces: []string{"default"}})
	}
	s, err := NewStore(f, Limits{Rate: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	tok := f.Tokens[500].Token
	b.ReportAllocs()
	for b.Loop() {
		p, ok := s.Token(tok)
		if !ok || !p.Limiter().Allow(time.Now(), 1) {
			b.Fatal("token refused")
		}
	}
}

// TestWarnings: a file other users may read, and tokens short enough to
// guess, are warned of (naming the principal, never the token); a file
// made private and strong tokens are not.
func TestWarnings(t *testing.T) {
	t.Parallel()
	strong := strings.Repeat("k", MinTokenBytes)
	path := writeFile(t, `{"tokens":[{"token":"abc","principal":"weak","roles":["admin"],"namespaces":["*"]},
 {"token":"`+strong+`","principal":"fine","roles":["reader"],"namespaces":["*"]}]}`)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(s.Warnings(), "\n")
	if !strings.Contains(w, "open to other users (mode 0644)") || !strings.Contains(w, `principal "weak"`) ||
		strings.Contains(w, `"fine"`) || strings.Contains(w, "abc") || len(s.Warnings()) != 2 {
		t.Fatalf("warnings:\n%s", w)
	}
	if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"`+strong+`","principal":"fine","roles":["reader"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Fatalf("warnings of a private file of strong tokens: %q", w)
	}
}

func TestTokenExpires(t *testing.T) {
	t.Parallel()
	strong := strings.Repeat("k", MinTokenBytes)
	path := writeFile(t, `{"tokens":[{"token":"`+strong+`","principal":"temp","roles":["holder"],"namespaces":["*"],"expires":"2030-01-02T03:04:05+01:00"},
 {"token":"`+strong+`old","principal":"gone","roles":["holder"],"namespaces":["*"],"expires":"2001-01-01T00:00:00Z"}]}`)
	s, err := Open(path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 2, 4, 5, 0, time.UTC)
	if p, exp, err := s.Authenticate(strong, at.Add(-time.Nanosecond)); err != nil || p.Name != "temp" || !exp.Equal(at) {
		t.Fatalf("just before expiry: %v, %v, %v", p, exp, err)
	}
	for _, now := range []time.Time{at, at.Add(time.Hour)} {
		var exp *ExpiredError
		if p, _, err := s.Authenticate(strong, now); !errors.As(err, &exp) || !exp.At.Equal(at) || p != nil {
			t.Fatalf("at %v: %v, %v; want expired at %v", now, p, err, at)
		}
	}
	if _, _, err := s.Authenticate("nope"+strong, at); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("unknown token: %v", err)
	}
	// A token expired when the file is read is warned of, by principal.
	w := strings.Join(s.Warnings(), "\n")
	if len(s.Warnings()) != 1 || !strings.Contains(w, `principal "gone"`) || !strings.Contains(w, "expired at 2001-01-01T00:00:00Z") || strings.Contains(w, strong) {
		t.Fatalf("warnings: %q", w)
	}
}
