package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// MaxFileBytes bounds an auth file.
const MaxFileBytes = 4 << 20

// MaxTokenBytes bounds one token.
const MaxTokenBytes = 4096

// MaxNameBytes bounds a principal name (an identifier, like a holder).
const MaxNameBytes = 128

// FileEntry is one entry of the auth file's "tokens" list.
type FileEntry struct {
	// Token authenticates "Authorization: Bearer <token>"; empty for a
	// client-certificate principal (matched by subject common name).
	Token string `json:"token,omitempty"`
	// Principal is the caller's name.
	Principal string `json:"principal"`
	// Roles: holder, worker, reader, admin.
	Roles []string `json:"roles"`
	// Namespaces are namespace patterns (trailing "*" allowed).
	Namespaces []string `json:"namespaces"`
	// Rate is the principal's request rate limit in requests per second
	// (0: the server's default).
	Rate float64 `json:"rate,omitempty"`
	// Burst is the token bucket's size (0: the server's default, or
	// the rate rounded up when Rate is set).
	Burst int `json:"burst,omitempty"`
	// Expires is when the token stops authenticating (RFC 3339, e.g.
	// "2027-01-31T00:00:00Z"); empty: never. Only for tokens: a client
	// certificate ends with its own validity.
	Expires string `json:"expires,omitempty"`
}

// File is the auth file: {"tokens": [...]}.
type File struct {
	Tokens []FileEntry `json:"tokens"`
}

// entry is a validated FileEntry.
type entry struct {
	token     []byte
	principal *Principal
	expires   time.Time // zero: never
}

// Table is a parsed, validated auth file: principals by token digest and
// certificate principals by name. A Table is immutable.
type Table struct {
	byDigest map[[sha256.Size]byte]entry
	byCert   map[string]*Principal
}

// ParseFile decodes and validates an auth file. Errors name the entry by
// its index and principal, never by its token. Unknown fields, duplicate
// tokens, unknown roles and malformed namespace patterns are refused.
func ParseFile(data []byte) (*File, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("auth file is %d bytes; the limit is %d", len(data), MaxFileBytes)
	}
	// The entries are decoded one by one so that an error in one (an
	// unknown field, a wrong type) names it.
	var raw struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("auth file: %w", sanitizeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("auth file: unexpected data after the JSON object")
	}
	if raw.Tokens == nil {
		return nil, errors.New(`auth file: missing "tokens" list`)
	}
	f := File{Tokens: make([]FileEntry, len(raw.Tokens))}
	for i, r := range raw.Tokens {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f.Tokens[i]); err != nil {
			return nil, fmt.Errorf("auth file: tokens[%d]: %w", i, sanitizeJSONError(err))
		}
	}
	return &f, f.validate()
}

// sanitizeJSONError drops the offending value from a decoding error,
// which could be (part of) a token.
func sanitizeJSONError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d", se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: the file ends too early")
	case errors.As(err, &te) && te.Field == "":
		return fmt.Errorf("expected an object, found a %s", te.Value)
	case errors.As(err, &te):
		return fmt.Errorf("field %q: wrong type %s", te.Field, te.Value)
	}
	return err
}

func (f *File) validate() error {
	tokens := map[[sha256.Size]byte]int{}
	certs := map[string]int{}
	rates := map[string][2]float64{}
	for i := range f.Tokens {
		e := &f.Tokens[i]
		where := fmt.Sprintf("auth file: tokens[%d] (principal %q)", i, e.Principal)
		if err := e.validate(); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if e.Token != "" {
			d := sha256.Sum256([]byte(e.Token))
			if j, dup := tokens[d]; dup {
				return fmt.Errorf("%s: the same token as tokens[%d]", where, j)
			}
			tokens[d] = i
		} else {
			if j, dup := certs[e.Principal]; dup {
				return fmt.Errorf("%s: a second certificate entry for this principal (tokens[%d])", where, j)
			}
			certs[e.Principal] = i
		}
		r := [2]float64{e.Rate, float64(e.Burst)}
		if prev, ok := rates[e.Principal]; ok && prev != r {
			return fmt.Errorf("%s: rate/burst differ from another entry of the same principal", where)
		}
		rates[e.Principal] = r
	}
	return nil
}

func (e *FileEntry) validate() error {
	switch {
	case e.Principal == "":
		return errors.New("principal is empty")
	case len(e.Principal) > MaxNameBytes:
		return fmt.Errorf("principal is longer than %d bytes", MaxNameBytes)
	}
	if err := checkPrintable("principal", e.Principal); err != nil {
		return err
	}
	if e.Token != "" {
		if err := checkToken(e.Token); err != nil {
			return fmt.Errorf("token: %w", err)
		}
	}
	if len(e.Roles) == 0 {
		return errors.New("roles: name at least one of holder, worker, reader, admin")
	}
	for _, r := range e.Roles {
		if _, err := parseRole(r); err != nil {
			return fmt.Errorf("roles: %w", err)
		}
	}
	if len(e.Namespaces) == 0 {
		return errors.New(`namespaces: name at least one pattern ("*" for every namespace)`)
	}
	for _, p := range e.Namespaces {
		if err := checkPattern(p); err != nil {
			return fmt.Errorf("namespaces: %w", err)
		}
	}
	if e.Expires != "" {
		if e.Token == "" {
			return errors.New("expires: only a token expires here (a client certificate ends with its own validity)")
		}
		if _, err := e.expiry(); err != nil {
			return err
		}
	}
	switch {
	case math.IsNaN(e.Rate) || math.IsInf(e.Rate, 0) || e.Rate < 0:
		return errors.New("rate must be a non-negative number of requests per second")
	case e.Burst < 0:
		return errors.New("burst must not be negative")
	case e.Burst > 0 && e.Rate == 0:
		return errors.New("burst needs a rate")
	}
	return nil
}

// expiry parses Expires (zero when empty).
func (e *FileEntry) expiry() (time.Time, error) {
	if e.Expires == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, e.Expires)
	if err != nil {
		return time.Time{}, fmt.Errorf("expires: %q is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)", e.Expires)
	}
	return t, nil
}

// checkToken allows the characters of RFC 6750's b64token, so that any
// token of the file can be sent in an Authorization header.
func checkToken(t string) error {
	if len(t) > MaxTokenBytes {
		return fmt.Errorf("longer than %d bytes", MaxTokenBytes)
	}
	for i := 0; i < len(t); i++ {
		if !tokenChar(t[i], i, t) {
			return errors.New(`may only contain letters, digits and -._~+/ (and trailing '=')`)
		}
	}
	return nil
}

func tokenChar(c byte, i int, t string) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/':
		return true
	case c == '=':
		// Only as trailing padding.
		for j := i; j < len(t); j++ {
			if t[j] != '=' {
				return false
			}
		}
		return i > 0
	}
	return false
}

// table builds the lookup table of a validated file, with limiters from
// limiter (called once per principal).
func (f *File) table(limiter func(name string, rate float64, burst int) *Limiter) *Table {
	t := &Table{byDigest: map[[sha256.Size]byte]entry{}, byCert: map[string]*Principal{}}
	lims := map[string]*Limiter{}
	for _, e := range f.Tokens {
		lim, ok := lims[e.Principal]
		if !ok {
			lim = limiter(e.Principal, e.Rate, e.Burst)
			lims[e.Principal] = lim
		}
		p := &Principal{Name: e.Principal, Namespaces: append([]string(nil), e.Namespaces...), limiter: lim}
		for _, r := range e.Roles {
			role, _ := parseRole(r)
			p.Roles = append(p.Roles, role)
		}
		if e.Token == "" {
			p.Certificate = true
			t.byCert[e.Principal] = p
			continue
		}
		exp, _ := e.expiry() // validated
		t.byDigest[sha256.Sum256([]byte(e.Token))] = entry{token: []byte(e.Token), principal: p, expires: exp}
	}
	return t
}

// MinTokenBytes is the shortest token the server takes without a warning:
// 16 random bytes, as base64 (openssl rand -base64 16) are 24 characters.
const MinTokenBytes = 16

// weakTokens names the principals whose tokens are shorter than
// MinTokenBytes, or expired at now (never the tokens).
func (f *File) weakTokens(now time.Time) []string {
	var out []string
	for i, e := range f.Tokens {
		if e.Token != "" && len(e.Token) < MinTokenBytes {
			out = append(out, fmt.Sprintf("auth file: tokens[%d] (principal %q): the token is %d characters, short enough to guess; "+
				"use at least %d characters, of 32 random bytes (openssl rand -base64 32)", i, e.Principal, len(e.Token), MinTokenBytes))
		}
		if exp, _ := e.expiry(); !exp.IsZero() && !now.Before(exp) {
			out = append(out, fmt.Sprintf("auth file: tokens[%d] (principal %q): the token expired at %s and authenticates no one: remove it",
				i, e.Principal, exp.UTC().Format(time.RFC3339)))
		}
	}
	return out
}
