package registrar

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Input limits (DESIGN §1.5).
const (
	MaxIdentifierBytes = 128
	MaxResourceBytes   = 512
	MaxStateBytes      = 64 << 10
	MaxReasonBytes     = 1024
	MaxBatchIDs        = 10_000
	DefaultNamespace   = "default"
)

// checkText validates a name: valid UTF-8, no control characters, not
// only white space, at most max bytes and, when required, not empty.
func checkText(field, v string, max int, required bool) error {
	if v == "" {
		if required {
			return invalid(field, "is required")
		}
		return nil
	}
	if len(v) > max {
		return invalid(field, "is %d bytes; the limit is %d", len(v), max)
	}
	blank := true
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return invalid(field, "contains a control character at byte %d", i)
			}
			blank = blank && c == ' '
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && n <= 1 {
			return invalid(field, "is not valid UTF-8 (byte %d)", i)
		}
		if r >= 0x80 && r <= 0x9f {
			return invalid(field, "contains the control character %U at byte %d", r, i)
		}
		if r == 0x2028 || r == 0x2029 {
			return invalid(field, "contains the line or paragraph separator %U at byte %d", r, i)
		}
		blank = blank && unicode.IsSpace(r)
		i += n
	}
	if blank {
		return invalid(field, "is only white space")
	}
	return nil
}

// CheckIdentifier validates a holder, namespace, queue or id field.
func CheckIdentifier(field, v string, required bool) error {
	return checkName(field, v, MaxIdentifierBytes, required)
}

// checkName is checkText for a name (identifier, resource, prefix): it
// also refuses the invisible formatting characters (Unicode's Cf: zero
// width and bidirectional controls), which make look-alikes of other names
// ("teamA\u200b" shows as "teamA"). Free text (reasons) may hold them.
func checkName(field, v string, max int, required bool) error {
	if err := checkText(field, v, max, required); err != nil {
		return err
	}
	for i, r := range v {
		if unicode.Is(unicode.Cf, r) {
			return invalid(field, "contains the invisible formatting character %U at byte %d", r, i)
		}
	}
	return nil
}

// CheckNamespace validates a namespace name: an identifier without '*'
// (which stands for the server-wide defaults in SetPolicy, and for "any"
// in tokens' namespaces and in routes) and without white space at either
// end (a look-alike of another namespace).
func CheckNamespace(field, v string, required bool) error {
	if err := CheckIdentifier(field, v, required); err != nil {
		return err
	}
	if strings.Contains(v, "*") {
		return invalid(field, "%q contains '*', which stands for every namespace (in policies, tokens and routes), not in a name", v)
	}
	if strings.TrimSpace(v) != v {
		return invalid(field, "%q starts or ends with white space", v)
	}
	return nil
}

// CheckResource validates a resource name.
func CheckResource(field, v string) error {
	return checkName(field, v, MaxResourceBytes, true)
}

// CheckPrefix validates an optional resource prefix (List, Watch).
func CheckPrefix(field, v string) error {
	return checkName(field, v, MaxResourceBytes, false)
}

// CheckLeaseIDText validates the shape of a lease id argument: non-empty,
// at most 128 bytes, printable. Unknown but well-formed ids are
// LEASE_NOT_FOUND, not INVALID_ARGUMENT (API.md).
func CheckLeaseIDText(field, v string) error {
	return checkText(field, v, MaxIdentifierBytes, true)
}

// CheckReason validates free text such as a revoke reason.
func CheckReason(field, v string) error {
	return checkText(field, v, MaxReasonBytes, false)
}

func checkMode(field string, m Mode) error {
	if m != Exclusive && m != Shared {
		return invalid(field, "unknown mode %d", m)
	}
	return nil
}

func checkDurationMs(field string, ms int64, allowZero bool) error {
	if ms < 0 || (!allowZero && ms == 0) {
		return invalid(field, "must be positive, got %dms", ms)
	}
	if ms > maxDurationMs {
		return invalid(field, "is longer than %d days", maxDurationMs/86_400_000)
	}
	return nil
}

// maxDurationMs bounds every duration argument (about 10 years) so that tick
// arithmetic can never overflow.
const maxDurationMs = 10 * 365 * 86_400_000

func checkBatch(field string, n int) error {
	if n > MaxBatchIDs {
		return invalid(field, "lists %d ids; the limit is %s", n, strconv.Itoa(MaxBatchIDs))
	}
	return nil
}

// OrDefault returns the default namespace for an empty one.
func OrDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}
