// Package tenure is the Go client of Tenure, the lease registrar.
//
//	c, err := tenure.New([]string{"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"})
//	lease, err := c.Acquire(ctx, "orders/42", tenure.TTL(15*time.Second))
//	defer lease.Release(ctx, tenure.ReleaseCompleted)
//	for step := range steps {
//		if !lease.Valid() { // lost, or a pause outlived the trust window
//			return lease.Err()
//		}
//		step.Do(ctx, lease.Fence()) // storage that checks the fence
//	}
//
// Watch lease.Done() to be told of a loss while waiting; check
// lease.Valid() right before each action (a process paused past the trust
// window may run before Done's timer does); pass lease.Fence() to storage
// that checks fences, for the pause between the check and the action.
//
// # Overview
//
// A lease is a time-bounded claim by a holder on a resource. The registrar
// decides: its clock (registrar ticks) is authoritative, and it never honours a
// lease at or after its expiry, not even by a millisecond. The client's job is
// to keep the leases it was granted alive for as long as the caller wants them,
// and to tell the caller, conservatively and on time, when it can no longer
// prove it holds one.
//
// # Trust window
//
// The client cannot read the registrar's clock. What it does know is when it
// sent a request: the registrar received it later, so a grant or renewal
// confirmed for a request sent at time S expires no earlier than S + ttl on
// any clock running at the same rate. The client therefore trusts a lease until
//
//	trusted_until = S + ttl − safety_margin
//
// where S is the send time of the last confirmed grant or renewal, measured on
// the client's monotonic clock (wall-clock jumps change nothing), and the safety
// margin absorbs clock-rate differences and scheduling delays. By default the
// margin is the larger of 500 ms and 10% of the ttl, capped at ttl/2 (see
// WithSafetyMargin); a 15 s lease is trusted for 13.5 s after each renewal is
// sent, a 2 s lease for 1.5 s. A response is matched to its request by id, and
// trust is never extended on a response whose send time is unknown (an answer
// to an abandoned stream, a duplicate). Lease.TrustedUntil returns the current
// end of the window.
//
// # Heartbeats
//
// Every Client keeps one KeepAlive stream open to the cluster and renews all of
// its leases over it. A lease is due for renewal ttl/3 after the send time of
// its last confirmed renewal; leases due at about the same time share one
// request. So a healthy lease is renewed about three times per ttl, and two
// renewals can be lost before its trust window is in danger. A renewal that
// gets no answer within max(ttl/6, 100 ms), or within the round trips
// renewals have been seen to take (RFC 6298's smoothed round trip plus four
// times its variation, doubled after each renewal presumed lost) but never
// more than ttl/3, is presumed lost with its stream. On a slow link keep the
// ttl well above the round trip: a lease is renewed every ttl/3 and trusted
// for ttl − margin after each renewal is sent, so ttl/3 plus a round trip
// must fit in that window (with 1 s leases, a 250 ms round trip through a
// follower already does not).
// A lease with a renewal limit (max_renewals > 0, as every task lease has)
// is never renewed before it is due, so it does not share an earlier request
// with other leases: a lease limited to n renewals is refused its (n+1)-th
// about (n+1)·ttl/3 after the grant.
//
// # Done and Err
//
// Lease.Done is closed, and Lease.Err set, when the lease ends for this client:
//   - the registrar refused a renewal for good: the lease expired
//     (ErrLeaseExpired), was revoked or released elsewhere (ErrLeaseTerminal),
//     is unknown (ErrLeaseNotFound), or hit a limit (ErrRenewalLimitExceeded,
//     ErrLifetimeExceeded) — the cause is the registrar's *Error;
//   - its trust window passed without a confirmed renewal (a partition, a
//     cluster without a leader for too long, a paused process):
//     ErrTrustWindowPassed — the registrar may still hold the lease for up to
//     the safety margin, but nothing proves it;
//   - it was released (Err is ErrReleased), or the Client was closed.
//
// The KeepAlive stream asks the registrar to tell it, unasked, when a lease
// it renews ends other than by this client's release (revoked, expired,
// transferred, ended with an ancestor, its task cancelled): such a lease is
// lost as soon as the
// stream hears of it, not at its next renewal. The stream follows a lease
// from its first renewal, or from half a second after its grant if that
// comes first (KeepAliveRequest.follow_lease_ids): a lease that ends sooner
// is heard of then.
//
// Every loss is a *LostError matching ErrLeaseLost. When Done is closed the
// caller must stop acting as the holder: stop writing, stop the work, and
// re-acquire if it still needs the resource (a new lease with a new fence).
// Done is a local, conservative signal closed by a timer: a process paused
// past the trust window (SIGSTOP, a long GC or VM pause) may act before the
// timer runs, so check Valid right before each action (it reads the clock,
// and is false at once after such a pause; Err stays nil until Done
// closes). Neither can protect against a pause between the check and the
// write: downstream storage should check the lease's Fence (see the
// fencing package, and CheckFence), and guarded state (WriteState) is
// checked by the registrar itself.
//
// # Failover
//
// The client knows every endpoint it was given, plus any leader it learns of,
// plus every member the cluster lists: after a call succeeds it asks the
// member that answered for the member list (at most every 30 s, in the
// background), so a client given one address can go on when that member
// goes away.
// When the KeepAlive stream breaks, stops answering, or answers NOT_LEADER, the
// client moves to another endpoint (the leader named in NOT_LEADER's metadata
// when there is one), reopens the stream and resends every unconfirmed renewal,
// all within the trust window; the registrar's time stands still while there is
// no leader, so a failover that finishes within the trust window loses no
// lease. How long a failover takes depends on how the leader fails: a
// SIGTERMed leader hands over in milliseconds, while a crashed or stalled
// one is replaced after an election (~1–3 s with the server's defaults, on
// top of the ~4 s a silent member takes to be given up). A lease meant to
// survive a stalled leader needs a trust window longer than that: a ttl of
// 10 s or more (measured from outside: 6 s survived a SIGSTOPped leader
// with 3.3 s to spare, 3 s did not).
//
// Unary calls fail over as far as it is safe. Reads (Get, Verify, ReadState,
// CheckFence, Status) are retried on another endpoint after any transient
// failure. Writes are retried only when nothing was proposed: NOT_LEADER, or a
// connection that was never made. OUTCOME_UNKNOWN (the write may or may not
// have been applied) is returned to the caller (ErrOutcomeUnknown), except for
// Release and Renew, which are idempotent and retried, and Acquire, which
// retries and recognises its own lease in the LEASE_HELD answer (see
// Client.Acquire). Retries last at most the retry budget (WithRetryBudget).
// A member that stops answering while its connection stays open (a stopped
// process, a stalled VM) is given up after about 4 s: 2 s of silence, then a
// ping unanswered for 2 s; its calls fail as above and move on.
//
// Reads are linearizable: answered or confirmed by the leader. A read made
// with a StaleReads context is answered by the member called, from its own
// state: available without a leader, but possibly behind.
//
// # Pipelined calls
//
// The frequent calls — Acquire and Claim without a wait, Renew, Release,
// Complete, Fail, RequestLeases and CompletePiece — travel as operations on
// one Pipeline stream per endpoint and service, shared by every goroutine
// of the Client, many in flight at once: the server handles each exactly as
// the unary RPC, with the same results and errors, at a fraction of the cost
// of one HTTP/2 request per call (three times the acquire+release cycles at
// 64 callers). A call whose stream breaks after sending it fails as a unary
// call that lost its connection would (its outcome unknown) and the next
// call opens a new stream. An endpoint that does not serve Pipeline is
// detected on the first call, which is made again as a unary call, and gets
// unary calls from then on; WithoutPipeline makes every call unary.
//
// # Errors
//
// Errors answered by the registrar are *Error values carrying the reason, the
// message (which starts with the reason), the metadata and the Connect code;
// test them with errors.Is against the sentinels (ErrLeaseHeld, ErrStaleEpoch,
// …). LEASE_HELD is a *HeldError naming the lease in the way, its holder, fence
// and time left. Transport failures are returned as Connect errors; a write
// whose request went out and whose connection then broke (a member killed
// mid-call) is also ErrOutcomeUnknown, as the server's own OUTCOME_UNKNOWN
// is: it may have been applied.
//
// # Helpers
//
// Mutex is a lock over a lease, RWMutex a readers-writer lock (each reader
// with a shared lease of its own), Election elects a leader and publishes its
// value in the resource's guarded state, VerifyAll and Resume are the boot-time
// reality check of a restarting agent, ReadState and WriteState are guarded
// state with epochs, and CheckFence asks whether a fence is still current.
//
// The piece pool (CreatePool, Want, RequestLeases, CompletePiece, Rankings,
// PoolStatus) leases pieces of files to ranked peers. Wanted sets and
// have-maps are Bitsets (or Ranges); a request that gets nothing is a
// *RejectedError matching ErrInvalidRequest, ErrPeerRankingTooLow,
// ErrPeerAtCapacity or ErrNoAvailablePieces (and ErrRejected).
//
// # Lease trees
//
// A lease acquired WithScope and WithBudget is the root of a lease tree.
// Lease.Derive issues a narrower, budgeted child for a sub-agent (DeriveFor):
// its budget is carved out of the parent's, its expiry never passes the
// parent's (the client trusts it only as long as the registrar granted),
// and it is kept alive like any lease. A child's Done closes when its parent
// ends in this client (cause ErrParentEnded), or as soon as the KeepAlive
// stream tells of it when an ancestor ended elsewhere (revoked, say). Lease.Consume spends from a
// counter (ErrBudgetExhausted, nothing charged, past the limit);
// Lease.Authorize answers nil or ErrScopeViolation; Client.Tree lists a
// lease's subtree. Derive and Consume are not repeated after an unknown
// outcome: either could take budget twice.
//
// # Several clusters
//
// Namespaces may be split across independent clusters, each its own
// registrar, when one leader's write rate is not enough. Routes maps each
// namespace (by name, by a prefix ending in "*", or "*" for the rest) to
// its cluster's endpoints, and a Router hands out one Client per namespace
// on the cluster that serves it, with that namespace as its default
// (ParseRoutes reads the CLI's TENURE_ROUTES format). Nothing spans
// clusters: a lease, a fence, a queue or a pool is in one.
//
// # Closing
//
// Close releases every lease the client still holds, stops the heartbeats and
// closes connections. A process that exits without Close leaves its leases to
// expire after their ttl.
package tenure
