// Package fault proves Tenure's guarantees under failure, from the test
// suite, against real `tenure server` processes.
//
// # Harness
//
// StartCluster builds nothing itself: the tests build ./cmd/tenure once per
// test binary (BuildBinary, without -race so the servers run at full speed)
// and start n members on loopback, each on its own IP (127.0.x.2, .3, …;
// Linux routes all of 127/8 to lo). A member's Raft address in the peer
// list is a fault-injecting TCP proxy on its IP that forwards to the
// member's own Raft listener. Members bound to a specific loopback IP dial
// their peers from it (internal/cluster's stream layer), so a proxy knows
// which member a connection comes from: Cluster.Cut refuses and cuts the
// connections between two members in both directions, Isolate cuts one
// member from all, Heal restores every link. Member.Kill is kill -9,
// Restart starts the process again on its data directory, Pause and Resume
// are SIGSTOP and SIGCONT, and Member.Env carries environment for the next
// start: TENURE_TEST_WALL_OFFSET=1h offsets the wall clock the member
// stamps on commands while it leads (a test hook of tenure server).
//
// # Histories
//
// Workload runs concurrent clients (the generated Connect clients, one
// endpoint at a time, moving to another member after an unclear answer)
// that acquire, renew, read and write guarded state, transfer and release
// or abandon leases on a few resources. Recorder keeps every operation:
// inputs, invocation and response times on one monotonic clock, outputs
// (lease id, fence, issued and expiry ticks, epoch, data) and the outcome:
// ok, failed with a reason, no effect (NOT_LEADER, UNAVAILABLE, a refused
// connection: nothing was proposed) or unknown (timeout, broken
// connection, OUTCOME_UNKNOWN: it may have happened). Nemesis injects
// faults (Faults: leader kill, follower kill, leader pause past the
// election timeout, leader isolation, a cut link between the leader and
// one follower, a member with its wall clock an hour off made leader) and
// notes each in the history.
//
// # Checks
//
// Model is a porcupine model of the registrar, partitioned per resource,
// over registrar ticks: a grant needs the previous holder released or
// past its expiry tick and a higher fence, a renewal or transfer needs the
// lease live at its tick, ticks never go backwards, LEASE_HELD must name
// the holder, guarded writes and reads behave as a register with epochs.
// Unknown operations return at the end of the history and may or may not
// have happened; what they would have produced is bounded, never guessed.
// CheckGrants adds the direct checks that need real time: fences unique
// per resource and following real time, and no grant of a resource (nor a
// renewal answering LEASE_EXPIRED) before send time + ttl of the previous
// holder's last acknowledged grant or renewal, unless it released it. The
// tests further verify every acknowledged grant after the cluster healed,
// and that expiry across a failover is at most the election + 100 ms late.
// On failure Check (and the cluster's cleanup) write history.json,
// porcupine's linearizability.html and the members' logs to a directory
// under $TENURE_ARTIFACTS (default: the system temp dir's
// tenure-fault-artifacts) and name it in the test output.
//
// # Modes
//
// The default run (what .ci/run runs) is the short mode: one round of
// every fault, about two minutes for the package. TENURE_FAULT_DURATION=10m
// (any Go duration) repeats the rounds of faults for that long as a soak
// run:
//
//	TENURE_FAULT_DURATION=10m go test -run TestLinearizableUnderFaults -timeout 30m -v ./internal/fault
package fault
