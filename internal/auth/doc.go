// Package auth decides who is calling Tenure's API and what they may do
// (DESIGN §1.5, docs/security.md).
//
// # Principals
//
// A principal is a name (it becomes the holder, worker or peer of what it
// acquires), a set of roles and a list of namespace patterns. Principals
// come from an auth file (JSON, see ParseFile):
//
//	{"tokens": [
//	  {"token": "s3cret", "principal": "w1", "roles": ["holder"], "namespaces": ["default"]},
//	  {"principal": "ops.example.com", "roles": ["admin"], "namespaces": ["*"]}
//	]}
//
// An entry with a token authenticates requests that carry
// "Authorization: Bearer <token>". An entry without a token names the
// principal of a client certificate: a verified certificate whose subject
// common name equals the entry's principal gets that entry's roles and
// namespaces. A certificate matched by no entry is a principal with no
// roles (it is authenticated, but may do nothing).
//
// # Roles
//
// holder (own leases), worker (queue and pool work), reader (queries and
// watch) and admin (everything, plus revoke, cluster operations and
// policies). Which role each RPC needs is stated in one table in the
// server package; this package only answers "does p have role r in
// namespace ns".
//
// # Namespaces
//
// A pattern is a namespace name, or a prefix followed by "*" ("team-*",
// or "*" alone for every namespace). The empty namespace of a request
// means "default".
//
// # Reload and rate limits
//
// A Store holds the current Table; Reload swaps in a newly read file
// atomically (SIGHUP), keeping the old table when the new file is
// invalid. Each principal has a token bucket (Limiter): the entry's rate
// and burst, or the store's defaults. Token comparison never depends on
// where the first differing byte is: tokens are looked up by their
// SHA-256 digest and confirmed with subtle.ConstantTimeCompare. Tokens
// are never logged or put in error messages.
package auth
