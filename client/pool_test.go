package tenure

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBitsetWireLayout(t *testing.T) {
	s := NewBitset(10)
	if s.Len() != 10 || s.Count() != 0 || !bytes.Equal(s.Bytes(), []byte{0, 0}) {
		t.Fatalf("empty: len %d count %d bytes %x", s.Len(), s.Count(), s.Bytes())
	}
	s.Set(0)
	s.Set(3)
	s.Set(9) // byte 1, bit 1
	if got := s.Bytes(); !bytes.Equal(got, []byte{0x09, 0x02}) {
		t.Fatalf("bytes %x, want 0902", got)
	}
	for i := range uint32(12) {
		if want := i == 0 || i == 3 || i == 9; s.Has(i) != want {
			t.Fatalf("Has(%d) = %v", i, !want)
		}
	}
	if s.Count() != 3 || s.String() != "0,3,9" {
		t.Fatalf("count %d string %q", s.Count(), s.String())
	}
	s.Clear(3)
	s.Clear(100) // out of range: no-op
	if s.Has(3) || s.Count() != 2 || s.Len() != 10 {
		t.Fatalf("after clear: %v", s)
	}
	// Bytes is a copy.
	b := s.Bytes()
	b[0] = 0xff
	if s.Has(1) {
		t.Fatal("Bytes aliases the set")
	}
}

func TestBitsetGrowAndZeroValue(t *testing.T) {
	var s Bitset
	if s.Len() != 0 || s.Has(0) || len(s.Bytes()) != 0 || len(s.wire()) != 0 {
		t.Fatalf("zero value: %+v", s)
	}
	s.Set(17)
	if s.Len() != 18 || len(s.Bytes()) != 3 || !s.Has(17) || s.Has(16) {
		t.Fatalf("after Set(17): len %d bytes %x", s.Len(), s.Bytes())
	}
	// The wire form drops trailing zero bytes: a set spanning more
	// pieces than the file has is still accepted when its members fit.
	w := NewBitset(64)
	w.Set(2)
	if got := w.wire(); !bytes.Equal(got, []byte{0x04}) {
		t.Fatalf("wire %x, want 04", got)
	}
}

func TestBitsetFromBoolsBytesRanges(t *testing.T) {
	s := BitsetFromBools([]bool{true, false, true, true, false, false, false, false, false, true})
	if s.Len() != 10 || !bytes.Equal(s.Bytes(), []byte{0x0d, 0x02}) {
		t.Fatalf("FromBools: len %d bytes %x", s.Len(), s.Bytes())
	}
	if got := BitsetFromBytes([]byte{0x0d, 0x02}); got.Len() != 16 || got.String() != "0,2-3,9" {
		t.Fatalf("FromBytes: %d %q", got.Len(), got.String())
	}
	r := FromRanges(Range{Start: 3, End: 21}, Range{Start: 30, End: 31}, Range{Start: 5, End: 5})
	if r.Len() != 31 || r.Count() != 19 || r.Has(2) || !r.Has(3) || !r.Has(20) || r.Has(21) || !r.Has(30) {
		t.Fatalf("FromRanges: len %d count %d %q", r.Len(), r.Count(), r.String())
	}
	if got := r.Ranges(); !slices.Equal(got, []Range{{3, 21}, {30, 31}}) {
		t.Fatalf("Ranges: %v", got)
	}
	// SetRange's byte fast path and bit path agree with Set.
	for start := range uint32(20) {
		for end := start; end < 40; end++ {
			var a, b Bitset
			a.SetRange(start, end)
			for i := start; i < end; i++ {
				b.Set(i)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatalf("SetRange(%d, %d) = %x, Set loop = %x", start, end, a.Bytes(), b.Bytes())
			}
		}
	}
}

func TestParseRanges(t *testing.T) {
	got, err := ParseRanges("0-99, 200-299,512")
	if err != nil || !slices.Equal(got, []Range{{0, 100}, {200, 300}, {512, 513}}) {
		t.Fatalf("ParseRanges: %v %v", got, err)
	}
	if s := FormatRanges(got); s != "0-99,200-299,512" {
		t.Fatalf("FormatRanges: %q", s)
	}
	for _, bad := range []string{"", ",", "a", "5-3", "1-", "-1", "1-2-3", "4294967295", "0-4294967295"} {
		if _, err := ParseRanges(bad); err == nil {
			t.Errorf("ParseRanges(%q) succeeded", bad)
		}
	}
}

func TestRejectedErrorMatching(t *testing.T) {
	err := error(&RejectedError{Reason: RejectedPeerAtCapacity, Message: "REJECTED_REASON_PEER_AT_CAPACITY: peer p holds 4 leases"})
	if !errors.Is(err, ErrPeerAtCapacity) || !errors.Is(err, ErrRejected) || errors.Is(err, ErrNoAvailablePieces) {
		t.Fatal("RejectedError matching")
	}
	if errors.Is(err, ErrInvalidArgument) || ReasonOf(err) != "" {
		t.Fatal("a rejection is not a registrar error")
	}
	if ErrNoAvailablePieces.Error() != "REJECTED_REASON_NO_AVAILABLE_PIECES" || Sentinel(ReasonPoolNotFound) != ErrPoolNotFound {
		t.Fatal("sentinels")
	}
}

// TestIntegrationPool runs the piece pool end to end against a real server:
// want, two peers request and complete, rankings per the seed's formula,
// every rejection and error a caller can see.
func TestIntegrationPool(t *testing.T) {
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)

	cfg, created, err := c.CreatePool(ctx, "swarm", MaxLeasesPerPeer(2), PieceLeaseDuration(time.Minute), PeerIdleTimeout(10*time.Minute))
	if err != nil || !created {
		t.Fatalf("CreatePool: %v %v", created, err)
	}
	want := PoolConfig{LeaseDuration: time.Minute, MaxLeasesPerPeer: 2, Decay: 0.95, SuccessBonus: 0.5, FailurePenalty: 1, MinScore: 0.2,
		PeerIdleTimeout: 10 * time.Minute}
	if cfg != want {
		t.Fatalf("config %+v, want %+v", cfg, want)
	}
	if _, created, err := c.CreatePool(ctx, "swarm", MaxLeasesPerPeer(2), PieceLeaseDuration(time.Minute), PeerIdleTimeout(10*time.Minute)); err != nil || created {
		t.Fatalf("CreatePool again: %v %v", created, err)
	}
	if _, _, err := c.CreatePool(ctx, "swarm", MaxLeasesPerPeer(3)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("CreatePool with another config: %v", err)
	}

	// File 0: all 10 pieces; file 1: pieces 0-3 of 16, by bits and a range.
	added, fs, err := c.Want(ctx, "swarm", 0, 10, AllPieces)
	if err != nil || added != 10 || fs != (FileStatus{File: 0, Pieces: 10, Wanted: 10}) {
		t.Fatalf("Want file 0: %d %+v %v", added, fs, err)
	}
	added, fs, err = c.Want(ctx, "swarm", 1, 16, BitsetFromBools([]bool{true, true}), Range{Start: 2, End: 4})
	if err != nil || added != 4 || fs.Wanted != 4 || fs.Pieces != 16 {
		t.Fatalf("Want file 1: %d %+v %v", added, fs, err)
	}
	if _, _, err := c.Want(ctx, "swarm", 1, 16, FromRanges(Range{Start: 0, End: 17})); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Want beyond the piece count: %v", err)
	}

	all0, all1 := FromRanges(Range{Start: 0, End: 10}), FromRanges(Range{Start: 0, End: 16})
	p1, err := c.RequestLeases(ctx, "swarm", "p1", map[uint32]Bitset{0: all0, 1: all1}, 5)
	if err != nil || len(p1) != 2 {
		t.Fatalf("p1 RequestLeases: %v %v", p1, err)
	}
	for _, l := range p1 {
		if l.LeaseID == "" || l.Fence == 0 || time.Until(l.ExpiresAt) < 50*time.Second || time.Until(l.ExpiresAt) > 61*time.Second {
			t.Fatalf("piece lease %+v", l)
		}
	}
	_, err = c.RequestLeases(ctx, "swarm", "p1", map[uint32]Bitset{0: all0}, 1)
	var rej *RejectedError
	if !errors.Is(err, ErrPeerAtCapacity) || !errors.Is(err, ErrRejected) || !errors.As(err, &rej) ||
		!strings.HasPrefix(err.Error(), "REJECTED_REASON_PEER_AT_CAPACITY: ") {
		t.Fatalf("p1 at capacity: %v", err)
	}
	p2, err := c.RequestLeases(ctx, "swarm", "p2", map[uint32]Bitset{0: all0}, 2)
	if err != nil || len(p2) != 2 {
		t.Fatalf("p2 RequestLeases: %v %v", p2, err)
	}
	for _, a := range p1 {
		for _, b := range p2 {
			if a.File == b.File && a.Piece == b.Piece {
				t.Fatalf("piece %d/%d leased to both peers", a.File, a.Piece)
			}
		}
	}

	// Only the holder completes.
	done := p1[0]
	if _, err := c.CompletePiece(ctx, "swarm", "p2", done.File, done.Piece, PieceSuccess, 0); !errors.Is(err, ErrPieceNotLeased) {
		t.Fatalf("completing p1's piece as p2: %v", err)
	}
	// One success from 1.0: 1.0·0.95^(a few ms in hours) + 1·0.5 − 0 ≈ 1.5.
	rk, err := c.CompletePiece(ctx, "swarm", "p1", done.File, done.Piece, PieceSuccess, 0)
	if err != nil || rk.Peer != "p1" || rk.Score < 1.499 || rk.Score > 1.5 || rk.Successes != 1 || rk.Failures != 0 || rk.CurrentLeases != 1 {
		t.Fatalf("p1 success: %+v %v", rk, err)
	}
	if _, err := c.CompletePiece(ctx, "swarm", "p1", done.File, done.Piece, PieceSuccess, 0); !errors.Is(err, ErrPieceNotLeased) {
		t.Fatalf("completing twice: %v", err)
	}
	// One failure from 1.0: 1.0 + 0 − 1·1.0 = 0, clamped to 0.1.
	rk, err = c.CompletePiece(ctx, "swarm", "p2", p2[0].File, p2[0].Piece, PieceFailure, PieceNetworkError)
	if err != nil || rk.Score != 0.1 || rk.Failures != 1 || rk.CurrentLeases != 1 {
		t.Fatalf("p2 failure: %+v %v", rk, err)
	}
	// 0.1 is below the minimum score 0.2.
	if _, err := c.RequestLeases(ctx, "swarm", "p2", map[uint32]Bitset{0: all0}, 1); !errors.Is(err, ErrPeerRankingTooLow) {
		t.Fatalf("p2 after failure: %v", err)
	}
	// Only a done piece: nothing to lease.
	var onlyDone Bitset
	onlyDone.Set(done.Piece)
	if _, err := c.RequestLeases(ctx, "swarm", "p3", map[uint32]Bitset{done.File: onlyDone}, 1); !errors.Is(err, ErrNoAvailablePieces) {
		t.Fatalf("p3 with only a done piece: %v", err)
	}
	for name, have := range map[string]map[uint32]Bitset{
		"unknown file":    {7: all0},
		"beyond the file": {0: FromRanges(Range{Start: 0, End: 11})},
	} {
		if _, err := c.RequestLeases(ctx, "swarm", "p3", have, 1); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := c.RequestLeases(ctx, "swarm", "p3", map[uint32]Bitset{0: all0}, 0); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("max 0: %v", err)
	}
	if _, err := c.RequestLeases(ctx, "swarm", "", map[uint32]Bitset{0: all0}, 1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty peer: %v", err)
	}

	rs, err := c.Rankings(ctx, "swarm")
	if err != nil || len(rs) != 3 || rs[0].Peer != "p1" || rs[0].Score < 1.499 || rs[2].Peer != "p2" || rs[2].Score != 0.1 || rs[1].Peer != "p3" || rs[1].Score != 1 {
		t.Fatalf("Rankings: %+v %v", rs, err)
	}
	st, err := c.PoolStatus(ctx, "swarm")
	if err != nil || st.Pool != "swarm" || st.Namespace != "default" || st.Config != want || len(st.Files) != 2 {
		t.Fatalf("PoolStatus: %+v %v", st, err)
	}
	var wanted, leased, doneN uint64
	for _, f := range st.Files {
		wanted, leased, doneN = wanted+f.Wanted, leased+f.Leased, doneN+f.Done
	}
	// 14 pieces: 1 done, 2 leased (p1 and p2 one each), the failed one wanted again.
	if wanted != 11 || leased != 2 || doneN != 1 {
		t.Fatalf("status counts wanted %d leased %d done %d: %+v", wanted, leased, doneN, st.Files)
	}
	peers := map[string]uint32{}
	for _, p := range st.Peers {
		peers[p.Peer] = p.CurrentLeases
	}
	if peers["p1"] != 1 || peers["p2"] != 1 {
		t.Fatalf("peers %+v", st.Peers)
	}

	if ps, err := c.PoolStats(ctx, "swarm"); err != nil || ps.GetQueued() != 11 || ps.GetLeased() != 2 || ps.GetSucceeded() != 1 ||
		ps.GetPeers() != 3 || ps.GetFailures() != 1 {
		t.Fatalf("PoolStats: %v %v", ps, err)
	}
	if _, err := c.PoolStatus(ctx, "nope"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("PoolStatus of an unknown pool: %v", err)
	}
	if _, err := c.PoolStats(ctx, "nope"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("PoolStats of an unknown pool: %v", err)
	}
	if _, err := c.CompletePiece(ctx, "nope", "p1", 0, 0, PieceSuccess, 0); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("CompletePiece in an unknown pool: %v", err)
	}

	// A fresh start for p1: its success forgotten, its lease kept.
	if r, err := c.ResetPeer(ctx, "swarm", "p1"); err != nil || !r.Known || r.Before.Successes != 1 ||
		r.Ranking != (PeerRanking{Peer: "p1", Score: 1, CurrentLeases: 1}) {
		t.Fatalf("ResetPeer: %+v %v", r, err)
	}
	if r, err := c.ResetPeer(ctx, "swarm", "ghost"); err != nil || r.Known {
		t.Fatalf("ResetPeer of an unknown peer: %+v %v", r, err)
	}
	if _, err := c.ResetPeer(ctx, "nope", "p1"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("ResetPeer in an unknown pool: %v", err)
	}

	// Deleted: the two leases left are revoked, and p1's completion of
	// its piece fails; a second delete finds nothing.
	del, err := c.DeletePool(ctx, "swarm")
	if err != nil || del != (PoolDeletion{Deleted: true, RevokedLeases: 2, Files: 2, PiecesDone: 1}) {
		t.Fatalf("DeletePool: %+v %v", del, err)
	}
	if _, err := c.CompletePiece(ctx, "swarm", "p1", p1[1].File, p1[1].Piece, PieceSuccess, 0); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("completing a piece of the deleted pool: %v", err)
	}
	if del, err := c.DeletePool(ctx, "swarm"); err != nil || del.Deleted {
		t.Fatalf("DeletePool again: %+v %v", del, err)
	}
}

// A piece lease's life from the peer's side: found again after losing
// track of it, renewed, and reported on by name, so that a report on an
// expired lease cannot end the lease the peer holds on the piece since.
func TestIntegrationPieceLeases(t *testing.T) {
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)

	if _, _, err := c.CreatePool(ctx, "slow", PieceLeaseDuration(time.Second), MinPeerScore(0)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Want(ctx, "slow", 0, 0, AllPieces); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("AllPieces of an unknown file without a count: %v", err)
	}
	if _, _, err := c.Want(ctx, "slow", 0, 2, Range{Start: 0, End: 1}); err != nil {
		t.Fatal(err)
	}
	// Piece count 0: as before, so AllPieces adds piece 1 too.
	if added, fs, err := c.Want(ctx, "slow", 0, 0, AllPieces); err != nil || added != 1 || fs.Wanted != 2 {
		t.Fatalf("Want AllPieces as before: %d %+v %v", added, fs, err)
	}
	if pools, err := c.ListPools(ctx); err != nil || !slices.Equal(pools, []string{"slow"}) {
		t.Fatalf("ListPools: %v %v", pools, err)
	}

	only0 := FromRanges(Range{Start: 0, End: 1})
	got, err := c.RequestLeases(ctx, "slow", "p1", map[uint32]Bitset{0: only0}, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("RequestLeases: %v %v", got, err)
	}
	first := got[0]
	held, err := c.PieceLeases(ctx, "slow", "p1")
	if err != nil || len(held) != 1 || held[0].LeaseID != first.LeaseID || held[0].File != 0 || held[0].Piece != 0 || held[0].Fence != first.Fence {
		t.Fatalf("PieceLeases: %+v %v (granted %+v)", held, err, first)
	}
	if other, err := c.PieceLeases(ctx, "slow", "p2"); err != nil || len(other) != 0 {
		t.Fatalf("PieceLeases of a peer holding none: %+v %v", other, err)
	}
	if _, err := c.RenewPiece(ctx, "p2", first); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renewing p1's piece as p2: %v", err)
	}
	renewed, err := c.RenewPiece(ctx, "p1", first)
	if err != nil || !renewed.ExpiresAt.After(first.ExpiresAt) {
		t.Fatalf("RenewPiece: %+v %v (was %v)", renewed, err, first.ExpiresAt)
	}

	// Let it expire: the piece is wanted again and p1 is granted it anew.
	var second PieceLease
	waitFor(t, "piece 0 granted again", 10*time.Second, func() bool {
		got, err := c.RequestLeases(ctx, "slow", "p1", map[uint32]Bitset{0: only0}, 1)
		if err != nil {
			return false
		}
		second = got[0]
		return true
	})
	if second.LeaseID == first.LeaseID || second.Piece != 0 {
		t.Fatalf("second grant %+v after %+v", second, first)
	}
	before, err := c.Rankings(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	// The late report on the first lease ends nothing.
	if _, err := c.CompletePieceLease(ctx, "slow", "p1", first, PieceSuccess, 0); !errors.Is(err, ErrPieceNotLeased) {
		t.Fatalf("completing the expired lease: %v", err)
	}
	if after, err := c.Rankings(ctx, "slow"); err != nil || !slices.Equal(after, before) {
		t.Fatalf("rankings moved: %+v, were %+v (%v)", after, before, err)
	}
	if held, err := c.PieceLeases(ctx, "slow", "p1"); err != nil || len(held) != 1 || held[0].LeaseID != second.LeaseID {
		t.Fatalf("after the late report p1 holds %+v (%v), want %s", held, err, second.LeaseID)
	}
	if _, err := c.CompletePieceLease(ctx, "slow", "p1", second, PieceSuccess, 0); err != nil {
		t.Fatalf("completing the current lease: %v", err)
	}
	if _, err := c.CompletePieceLease(ctx, "slow", "p1", PieceLease{}, PieceSuccess, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a piece lease without id: %v", err)
	}
	st, err := c.PoolStatus(ctx, "slow")
	if err != nil || st.Files[0].Done != 1 || st.Files[0].Leased != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// A piece lease this client keeps alive (Resume) ends as released, not
// lost, when the peer reports on the piece, by lease or by piece.
func TestIntegrationCompletedPieceIsReleased(t *testing.T) {
	s := startRealServer(t)
	c := s.client(t, WithHolder("p1"))
	ctx := ctxTimeout(t, 30*time.Second)
	// Want creates a pool, so an unknown one is not the error: the count is.
	if _, _, err := c.Want(ctx, "kept", 0, 0, AllPieces); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "piece_count") {
		t.Fatalf("AllPieces without a count in a pool not made yet: %v", err)
	}
	if _, _, err := c.Want(ctx, "kept", 0, 2, AllPieces); err != nil {
		t.Fatal(err)
	}
	got, err := c.RequestLeases(ctx, "kept", "p1", map[uint32]Bitset{0: FromRanges(Range{Start: 0, End: 2})}, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("RequestLeases: %v %v", got, err)
	}
	kept := make([]*Lease, len(got))
	for i, pl := range got {
		if kept[i], err = c.Resume(ctx, pl.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CompletePieceLease(ctx, "kept", "p1", got[0], PieceSuccess, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompletePiece(ctx, "kept", "p1", got[1].File, got[1].Piece, PieceFailure, PieceTimeout); err != nil {
		t.Fatal(err)
	}
	for i, l := range kept {
		select {
		case <-l.Done():
		default:
			t.Fatalf("lease %d still kept alive after its piece was reported", i)
		}
		if !errors.Is(l.Err(), ErrReleased) {
			t.Fatalf("lease %d: Err = %v, want ErrReleased", i, l.Err())
		}
	}
}
