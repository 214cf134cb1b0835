// Package queue is Tenure's work-queue domain: named queues of tasks per
// namespace, each claimed under an ordinary registrar lease. Like the
// registrar it is pure: commands decide and emit records through the
// registrar's *Tx; Apply(record) is the only place state changes; no I/O,
// clocks, goroutines or randomness.
//
// # Life of a task
//
//	Enqueue ─▶ QUEUED ──Claim──▶ LEASED ──Complete──▶ SUCCEEDED
//	             ▲                 │ ──Fail──▶ FAILED (claimable after backoff)
//	             └── lease ended ──┤ ──Fail / lease expired, attempts used up──▶ DEAD
//	                 (expiry, release, revoke)   ──Cancel──▶ CANCELLED
//
// A claim starts an attempt: it issues the task's lease (resource
// "queue/<queue>/<task id>", holder the worker, renewal limits 10 renewals
// and 2 h lifetime) through registrar.IssueFor and records the claim in the
// same apply step. Complete and Fail are accepted only with the task's
// current lease (else TASK_NOT_LEASED) and release that lease. A task lease
// that ends any other way requeues the task through the registrar's
// OnLeaseEnd hook, in the same step. A lease that expired (its worker died
// or stalled) used its attempt, and a task whose attempts are used up is
// DEAD; a lease given back (released, as a draining worker does, or
// revoked) returns its attempt, and the task is queued again even on its
// last one.
//
// # Order and time
//
// Claims take the highest priority first, then the earliest ready time
// (enqueue time, not_before, or retry time), then enqueue order. Ready
// times are wall milliseconds (UTC), decided with the command's wall time;
// backoff after a failure is attempt⁴ seconds (capped at 1 h) with jitter
// derived from the task id and attempt, so every replica computes the same. Finished tasks
// (SUCCEEDED, DEAD, CANCELLED) are pruned at a tick fixed when they finish
// (the namespace's lease retention later; for a DEAD task its dead task
// retention, when its policy sets one, else a day, commands of rules 4
// on), or earlier when the namespace
// keeps more than its policy's MaxRetainedTasks (the oldest of the queue
// keeping the most first); an id may be reused after that.
package queue
