// Package registrar is Tenure's lease domain: the pure, deterministic state
// machine that decides every lease question.
//
// # Model
//
// A lease is a claim by a holder on a resource (in a namespace) for a ttl.
// A lease is EXCLUSIVE (one holder) or SHARED (any number of shared
// holders, never beside an exclusive one). Its life is
//
//	(none) ──Acquire──▶ ACTIVE ──Release──▶ RELEASED
//	                       │  ──deadline──▶ EXPIRED
//	                       │  ──Revoke───▶ REVOKED
//	                       └─ Transfer: RELEASED/TRANSFERRED + a new lease
//
// Renew keeps a lease ACTIVE and moves its expiry to tick+ttl. Terminal
// states never change again (INV-0101); terminal leases are pruned after
// the namespace's lease retention, counted from the tick of the record
// that ended them.
//
// # Purity and the ledger
//
// Commands come in stamped with a tick; they decide (validate, look at the
// state) and emit records through a Tx; every state change happens in
// Apply, which the state machine calls for each emitted record after
// sealing it into the ledger's hash chain. Replaying the records rebuilds
// the state byte for byte (INV-0502). Nothing here does I/O, reads a
// clock, starts a goroutine or draws randomness: the key seed arrives in
// the Bootstrap command. A rejected command emits nothing (besides the
// expiries due at its tick, which every command applies first).
//
// # Time
//
// Ticks are registrar milliseconds, stamped by the Raft leader and never
// going backwards; they alone decide expiry. A lease is honoured while
// tick < deadline, where deadline is its expiry or, after a restart grace,
// the end of that grace; strictly, so a renewal at the expiry tick fails
// (CTR-0301). Wall times (unix ms, UTC) ride along for people and audit;
// a wall-clock jump changes no lease. Every command first applies
// everything due by its tick (Advance): leases whose deadline passed
// expire, waiters whose wait ran out leave their queue, in time order.
// So expiry is exact even when the leader's background expirer is late;
// the expirer only makes the events prompt. An expired lease terminates at
// its own expiry, never at a time a request supplies (INV-0304). Due
// leases sit in a min-heap, so finding k of them costs O(k log n).
//
// # Fences and ids
//
// Every lease takes the next value of one registrar-wide sequence. That
// value is its fence — so fences are strictly increasing per resource and
// never reused, not after release, expiry, pruning, snapshot or failover —
// and, with the issuing wall time and a cluster tag, its ULID-shaped id.
//
// # Waiters
//
// An Acquire with a wait joins the resource's FIFO queue when it cannot be
// granted. When a lease ends, the head of the queue is granted in the same
// step: one exclusive waiter, or a run of shared ones. A queued exclusive
// request blocks later shared ones, so writers do not starve. A waiter
// whose deadline passes is dropped with a wait-ended record.
//
// # Limits
//
// Per-namespace policies set the ttl range and default, renewal limits
// (max renewals, max lifetime from the grant — expiry is never extended
// past it), the restart grace cap, quotas (active leases per holder and per
// namespace, waiters per resource) and retention. Every rejected input is a
// typed *Error (or *HeldError) whose reason is machine readable and whose
// metadata names the field or gives the counts and limits.
//
// # Restart grace and guarded state
//
// A holder that restarts may declare it: each of its active leases is then
// honoured up to the grace (≤ 15 s) past its expiry, once per lease and
// never past its max lifetime, so it can Verify and renew. Each resource
// may carry a small guarded state blob with an epoch; only the resource's
// active exclusive lease may write it, and only at the current epoch
// (LEASE_VIOLATION, STALE_EPOCH, FUTURE_EPOCH). The state outlives leases,
// so a successor resumes where a crashed holder stopped.
//
// # Lease trees: scope, budget, derivation
//
// A lease may carry a scope (namespaces, resource prefixes, actions; an
// empty list is unrestricted of that kind) and a budget (named counters
// with limits). Derive issues a child lease for the holder of an active
// parent: the child's empty scope lists are inherited, its non-empty ones
// must lie inside the parent's (a namespace or action listed by the
// parent, a resource prefix extending one of the parent's), and its own
// namespace and resource must be inside the parent's scope, else
// SCOPE_VIOLATION. The child is an ordinary lease (own id and fence, on
// its own resource, renewed like any lease) whose expiry, at grant and at
// every renewal, is capped at its parent's deadline (a longer ttl is
// shortened, not refused). Up to MaxTreeDepth levels below a root.
//
// Budgets are carved, never shared. Each counter of a lease has a limit
// (or none), used and reserved; remaining = limit − used − reserved. A
// child's limits are reserved out of its parent's remaining at derive time
// (BUDGET_EXHAUSTED naming the parent otherwise). Consume charges the lease
// itself, within its own remaining; since every ancestor's share for the
// lease was reserved when it was derived, no ancestor can be overspent, so
// the charge is one record and "charging every ancestor" needs no
// ancestor write: an ancestor's reservation is its charge. A counter the
// lease does not limit is spendable only if no ancestor limits it (a
// counter limited above and not carved down has nothing to spend: the
// answer is BUDGET_EXHAUSTED with limit 0); limited nowhere in the chain it
// is unlimited and only counted. On BUDGET_EXHAUSTED nothing is charged.
// When a child ends, its reservation in the parent is freed and what it
// (and through it, its ended subtree) used is added to the parent's used:
// the unused share returns, the spending shows up where it was granted.
// So at every step used + reserved ≤ limit on every lease, and the
// limits carved to a lease's active children sum to its reserved.
//
// Ending a lease (release, expiry, revoke, transfer) ends its whole
// subtree in the same command, deepest first, each descendant with the
// lease's terminal state, reason and revoke reason and an ended_by naming
// the ancestor whose end caused it; so when the lease's own record is
// applied its subtree's spending has come back to it, and sibling domains
// hear of every cascaded end through OnLeaseEnd. A transfer ends the
// subtree, and the successor keeps the old lease's parent and scope with
// what it had left as its limits, so a transfer never widens a budget.
// Reads evaluate a lease at its chain deadline: it reads EXPIRED once an
// ancestor's deadline passed, even before the records are applied.
// Authorize answers whether a lease's scope covers a resource or action;
// Tree lists a lease's subtree, parents before children.
package registrar
