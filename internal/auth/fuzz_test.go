package auth

import (
	"strings"
	"testing"
)

// FuzzParseFile: any input either parses into a store whose every token
// authenticates its own principal, or is refused with an error that
// quotes no token of the input.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"tokens":[]}`))
	f.Add([]byte(`{"tokens":[{"token":"a=","principal":"p","roles":["admin"],"namespaces":["*"],"rate":1e308,"burst":9}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ParseFile(data)
		if err != nil {
			return
		}
		s, err := NewStore(file, Limits{Rate: 10})
		if err != nil {
			t.Fatalf("a parsed file does not make a store: %v", err)
		}
		for _, e := range file.Tokens {
			if e.Token == "" {
				if p := s.Certificate(e.Principal); p.Name != e.Principal || len(p.Roles) == 0 {
					t.Fatalf("certificate entry %q not found", e.Principal)
				}
				continue
			}
			p, ok := s.Token(e.Token)
			if !ok || p.Name != e.Principal {
				t.Fatalf("token of %q does not authenticate it", e.Principal)
			}
			if _, ok := s.Token(e.Token + "x"); ok {
				if _, listed := tokenListed(file, e.Token+"x"); !listed {
					t.Fatal("a token with a byte appended authenticates")
				}
			}
			if _, ok := s.Token(e.Token[:len(e.Token)-1]); ok {
				if _, listed := tokenListed(file, e.Token[:len(e.Token)-1]); !listed {
					t.Fatal("a token with its last byte cut authenticates")
				}
			}
			got, err := ParseAuthorization("Bearer " + e.Token)
			if err != nil || got != e.Token {
				t.Fatalf("a valid file token does not pass the header parser: %v", err)
			}
		}
	})
}

func tokenListed(f *File, tok string) (int, bool) {
	for i, e := range f.Tokens {
		if e.Token == tok {
			return i, true
		}
	}
	return 0, false
}

// FuzzParseAuthorization: a parsed token is non-empty, contains no
// whitespace, and round-trips through the canonical header form.
func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x==", "Basic Zm9v", "", "Bearer", "Bearer a\tb", "Bearer \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := ParseAuthorization(h)
		if err != nil {
			if tok != "" {
				t.Fatal("a token with an error")
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			t.Fatalf("bad token %q from %q", tok, h)
		}
		again, err := ParseAuthorization("Bearer " + tok)
		if err != nil || again != tok {
			t.Fatalf("round trip of %q: %q, %v", tok, again, err)
		}
	})
}
