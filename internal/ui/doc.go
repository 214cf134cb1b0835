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
