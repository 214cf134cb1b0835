// Package ui is Tenure's web dashboard, served by every member at /ui/.
//
// The dashboard is plain HTML, CSS and ES modules embedded in the binary
// (no build step, no framework): `go build` alone produces the full
// dashboard. It has no private API. Everything it shows comes from the same
// Connect JSON API every other client uses, called from the browser:
//
//   - unary calls are `POST /tenure.v1.<Service>/<Method>` with
//     `Content-Type: application/json`;
//   - the live event feed is LeaseService.Watch over the Connect streaming
//     protocol (`application/connect+json`, enveloped messages: a flags byte
//     and a big-endian uint32 length before each JSON message), read from a
//     fetch ReadableStream. A dropped stream reconnects with afterIndex set to
//     the last event seen, so no event is missed while the server's feed
//     still holds it; an index that has left the feed restarts live and the
//     feed says so.
//
// Connections: each visible dashboard page holds one connection to the
// server open, its Watch stream, and over plain HTTP (HTTP/1.1) browsers
// allow six connections per server, across all tabs; a seventh page's
// calls would wait for one to free. So a page closes its stream while it
// is hidden (another tab in front, a minimised window: visibilitychange)
// or kept in the back/forward cache (pagehide), and resumes it when shown
// again from the last event it received, keeping the events it has (a
// resume the server's feed can no longer serve starts live, as above).
// Over HTTPS browsers speak HTTP/2, which carries every stream of a server
// on one connection.
//
// Two list RPCs exist for the dashboard's sake (and anyone else's):
// QueueService.ListQueues (a namespace's queues with their counts) and
// PoolService.ListPools (a namespace's pools).
//
// Member health on the overview is whether each member's /healthz answers:
// the answering member's directly, the others' with a no-cors fetch, which
// cannot read the answer but fails when nothing answers.
//
// Rates (grants, renewals and expiries per second) and recent errors by
// reason come from the member's public Prometheus endpoint, /metrics: the
// browser samples the counters every two seconds and shows the differences.
// They are the answering member's figures across every namespace; the
// lease counts, queues and pools are the selected namespace's, from the API.
//
// Namespaces: the address is the truth. A view's namespace is the ?ns= of
// its URL fragment (#/leases?ns=team-a), default without one; every
// dashboard link a page builds carries it, so a link opened in another tab
// or sent to someone shows the same page, and each tab has its own
// namespace. The namespace field and Apply change the address. A principal
// allowed exactly one namespace (no wildcard) is shown that one when the
// address names none. A view stops polling once the server refuses it a
// read (PERMISSION_DENIED: the token may not use the namespace), as it
// does without an accepted token: asking again would get the same answer
// and count another rejection; Apply, or another page, asks again.
//
// Authentication: when the server requires tokens, the token typed into the
// header is kept in the browser's localStorage and sent as
// `Authorization: Bearer <token>` on every call. On load and on every
// Apply the dashboard asks ClusterService.WhoAmI who the token belongs to
// and shows the principal, roles and namespaces in the header, or
// UNAUTHENTICATED with a prompt for a token. Admin actions (revoke a lease,
// cancel a task) are offered up front only where WhoAmI's roles and
// namespace patterns allow them (the rules of internal/server/access.go);
// a server without authentication, or one that cannot say, gets them all.
// The server still decides: a refusal (PERMISSION_DENIED…) is shown with
// its reason and hides those actions for that token.
//
// Lease trees: a lease's page (#/lease/<id>) walks parentLeaseId up to the
// root it may read and draws LeaseService.Tree from there, indented, with
// per-counter budget bars (used, reserved for children, left of the limit).
//
// Views are addressed by the URL fragment (#/leases?prefix=orders/), so the
// server only serves static files and the API.
package ui
