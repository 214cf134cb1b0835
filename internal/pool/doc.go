// Package pool is Tenure's piece pool (DESIGN §1.4, seed 004): pools of
// files whose pieces are leased to ranked peers according to what each
// peer has, rarest first.
//
// # Model
//
// A pool (namespace, name) has a configuration (lease duration, leases per
// peer, ranking decay per hour, success bonus, failure penalty, minimum
// score) and files (file_index → piece count). Every piece of a file is
// in at most one of three sets: wanted, leased, done. Want adds pieces to
// wanted (done pieces stay done, leased ones stay leased). A pool named by
// Want that does not exist yet is created with the default configuration.
//
// RequestLeases(peer, have-maps, max) first records the peer's have-maps
// (a record only when a map changed); the pool keeps, per piece, how many
// peers' latest have-maps contain it (availability). It then grants up to
// min(max, cap − current) pieces from have ∩ wanted, lowest availability
// first; within one availability, round robin across the requested files
// (ascending file index), lowest piece index first. Each piece is granted
// under an ordinary registrar lease on "pool/<pool>/<file>/<piece>" in the
// pool's namespace, issued in the same apply step (registrar.IssueFor). A
// piece whose resource is held outside the pool is skipped. Rejections, in
// API.md's precedence: INVALID_REQUEST, PEER_RANKING_TOO_LOW,
// PEER_AT_CAPACITY, NO_AVAILABLE_PIECES. Valid requests record the
// have-maps even when rejected (the pool has seen them).
//
// CompletePiece by the peer holding the piece's lease: SUCCESS moves the
// piece to done for good and rewards the peer; FAILURE (with a reason)
// returns it to wanted and penalises; both release the lease (COMPLETED /
// ABORTED). Anyone else gets PIECE_NOT_LEASED. A piece lease that ends
// otherwise (registrar OnLeaseEnd, same apply step) returns the piece to
// wanted; when it expired, that counts as a failure for the peer. A
// release or revoke of the lease outside the pool does not rank.
//
// # Ranking (seed 004, exactly)
//
// A peer starts at 1.0. On each outcome, successes or failures is counted
// and score = score·decay^(hours since last update) + rate·bonus −
// (1−rate)·penalty, clamped to [0.1, 10], rate = successes/(successes +
// failures); hours are registrar ticks / 3.6e6, so replay is exact. The
// last update starts when the peer is first seen. A peer whose score is
// below the minimum is refused (note: the seed's formula only changes a
// score on outcomes, so a refused peer with no lease stays refused).
// Records carry the new score, so every replica applies the same bits.
//
// # Availability index
//
// Derived state, rebuilt on restore: per file, each piece's availability
// and the wanted pieces bucketed by availability (roaring bitmaps); per
// pool, the availabilities present among wanted pieces, ascending. A
// have-map change moves the wanted pieces it touches between buckets a
// bucket at a time (bitmap operations, not piece by piece), so a new
// peer's have-map costs set operations over the levels it spans. Choosing
// walks the levels upward and tests bucket members against the request's
// bits, switching to bitmap intersection after a bounded number of tests.
// Nothing in it depends on the order of past operations: equal states give
// equal choices.
//
// # Purity
//
// Like the registrar: commands decide and emit records through a
// registrar.Tx; Apply(record) is the only place state changes; no I/O,
// clocks or goroutines. Bit sets in records and snapshots are canonical
// roaring bitmaps, so equal states give equal snapshot bytes.
package pool
