package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limits are the default request budget of principals whose entry sets
// no rate.
type Limits struct {
	// Rate is requests per second per principal (0: unlimited).
	Rate float64
	// Burst is the bucket size (0: Rate rounded up, at least 1).
	Burst int
}

// Validate checks the limits; messages name the field.
func (l Limits) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate < 0:
		return errors.New("rate-limit: must be a non-negative number of requests per second")
	case l.Burst < 0:
		return errors.New("rate-burst: must not be negative")
	}
	return nil
}

// Store holds the current auth table and the principals' token buckets.
// It is safe for concurrent use; Reload swaps the table atomically.
type Store struct {
	path     string
	defaults Limits
	cur      atomic.Pointer[Table]

	mu       sync.Mutex // serializes reloads
	warnings []string   // of the file last read (Warnings)
	limiters map[string]*Limiter
	// strangers are the request budgets of certificate principals no
	// entry names (the default rate), by name; at most maxStrangers.
	strangers map[string]*Limiter
}

// maxStrangers bounds the budgets kept for certificate principals no
// entry names: past it they start over (full buckets).
const maxStrangers = 10_000

// Open reads and validates the auth file at path.
func Open(path string, defaults Limits) (*Store, error) {
	if err := defaults.Validate(); err != nil {
		return nil, err
	}
	s := &Store{path: path, defaults: defaults, limiters: map[string]*Limiter{}}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewStore builds a store from an in-memory file (tests, embedding).
// Reload re-validates f; there is no path to re-read.
func NewStore(f *File, defaults Limits) (*Store, error) {
	if err := defaults.Validate(); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	s := &Store{defaults: defaults, limiters: map[string]*Limiter{}}
	s.install(f)
	return s, nil
}

// Path is the auth file the store reloads from.
func (s *Store) Path() string { return s.path }

// Reload re-reads the auth file. On any error the current table stays in
// force (a half-written file never locks everyone out) and the error says
// what is wrong without quoting tokens. A principal whose rate settings
// did not change keeps its bucket.
func (s *Store) Reload() error {
	if s.path == "" {
		return errors.New("auth: this store has no file to reload")
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return err
	}
	var warn []string
	if fi, err := os.Stat(s.path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warn = append(warn, fmt.Sprintf("auth file %s is open to other users (mode %#o) and holds every token: chmod 600 it", s.path, fi.Mode().Perm()))
	}
	warn = append(warn, f.weakTokens(time.Now())...)
	s.install(f)
	s.mu.Lock()
	s.warnings = warn
	s.mu.Unlock()
	return nil
}

// Warnings are what is unsafe about the auth file last read, in words an
// operator acts on: a file other users may read, tokens short enough to
// guess. They do not stop the server.
func (s *Store) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.warnings
}

func (s *Store) install(f *File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]*Limiter{}
	t := f.table(func(name string, r float64, burst int) *Limiter {
		if r == 0 {
			r, burst = s.defaults.Rate, s.defaults.Burst
		}
		if r == 0 {
			return nil
		}
		if burst == 0 {
			burst = max(1, int(math.Ceil(r)))
		}
		l := s.limiters[name]
		if l == nil || l.rate != r || l.burst != burst {
			l = newLimiter(r, burst)
		}
		next[name] = l
		return l
	})
	s.limiters = next
	s.cur.Store(t)
}

// Token returns the principal a bearer token authenticates now, or false.
func (s *Store) Token(token string) (*Principal, bool) {
	p, _, err := s.Authenticate(token, time.Now())
	return p, err == nil
}

// ErrUnknownToken is Authenticate's answer for a token the auth file does
// not hold (never did, or no longer does).
var ErrUnknownToken = errors.New("unknown token")

// ExpiredError is Authenticate's answer for a token whose entry expired.
type ExpiredError struct{ At time.Time }

func (e *ExpiredError) Error() string {
	return "the token expired at " + e.At.UTC().Format(time.RFC3339)
}

// Authenticate returns the principal the bearer token authenticates at
// now, and when the token expires (zero: never): ErrUnknownToken, or an
// *ExpiredError, when none.
func (s *Store) Authenticate(token string, now time.Time) (*Principal, time.Time, error) {
	t := s.cur.Load()
	e, ok := t.byDigest[sha256.Sum256([]byte(token))]
	// The digest lookup already tells tokens apart; the comparison makes
	// the match itself independent of where the bytes differ.
	if !ok || subtle.ConstantTimeCompare(e.token, []byte(token)) != 1 {
		return nil, time.Time{}, ErrUnknownToken
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return nil, time.Time{}, &ExpiredError{At: e.expires}
	}
	return e.principal, e.expires, nil
}

// Certificate returns the principal of a verified client certificate
// whose subject common name is name: its auth file entry, or a principal
// with no roles when no entry names it.
func (s *Store) Certificate(name string) *Principal {
	if p, ok := s.cur.Load().byCert[name]; ok {
		return p
	}
	return &Principal{Name: name, Certificate: true, limiter: s.strangerLimiter(name)}
}

// strangerLimiter is the default request budget of a certificate
// principal no entry names, kept by name (nil when there is no default
// rate): such a principal may only read /metrics and call WhoAmI, but as
// often as the others may call anything.
func (s *Store) strangerLimiter(name string) *Limiter {
	r, burst := s.defaults.Rate, s.defaults.Burst
	if r == 0 {
		return nil
	}
	if burst == 0 {
		burst = max(1, int(math.Ceil(r)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.strangers[name]
	if l == nil {
		if s.strangers == nil || len(s.strangers) >= maxStrangers {
			s.strangers = map[string]*Limiter{}
		}
		l = newLimiter(r, burst)
		s.strangers[name] = l
	}
	return l
}

// Limiter is a principal's token bucket.
type Limiter struct {
	rate  float64
	burst int
	l     *rate.Limiter
}

func newLimiter(r float64, burst int) *Limiter {
	return &Limiter{rate: r, burst: burst, l: rate.NewLimiter(rate.Limit(r), burst)}
}

// Allow takes n tokens at time now, or reports false and takes none.
func (l *Limiter) Allow(now time.Time, n int) bool { return l.l.AllowN(now, n) }

// Rate is the refill rate in requests per second.
func (l *Limiter) Rate() float64 { return l.rate }

// Burst is the bucket size.
func (l *Limiter) Burst() int { return l.burst }

// ErrNoCredentials is returned by ParseAuthorization for an absent header.
var ErrNoCredentials = errors.New("no credentials")

// ParseAuthorization extracts the token of an "Authorization: Bearer
// <token>" header value (RFC 6750: the scheme is case-insensitive, then
// one or more spaces, then the token). An empty value is
// ErrNoCredentials; anything else malformed is an error that does not
// quote the value.
func ParseAuthorization(h string) (string, error) {
	h = strings.Trim(h, " \t")
	if h == "" {
		return "", ErrNoCredentials
	}
	scheme, rest, ok := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New(`the Authorization header must use the Bearer scheme ("Authorization: Bearer <token>")`)
	}
	token := strings.TrimLeft(rest, " ")
	if !ok || token == "" {
		return "", errors.New("the Authorization header has no token after Bearer")
	}
	if err := checkToken(token); err != nil {
		return "", fmt.Errorf("the bearer token is malformed: %w", err)
	}
	return token, nil
}
