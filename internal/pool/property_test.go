package pool_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
)

// TestProperties drives a statemachine.Machine with random pool commands
// (two files, three peers, expiry by time passing, leases released or
// revoked from outside) and checks after every step: every piece in at
// most one of wanted/leased/done and every wanted piece in one; no piece
// leased twice and every pool lease an active registrar lease of its peer;
// no peer above its cap; every score within [0.1, 10]; availability index
// consistent (pool.Check). Peers may be forgotten when idle (random
// timeouts); from a random step on, a twin restored from a snapshot is
// given the same commands and must emit the same records. At the end:
// replay and restore give the same snapshot bytes.
func TestProperties(t *testing.T) {
	peers := []string{"a", "b", "c"}
	counts := []uint32{13, 20}
	rapid.Check(t, func(rt *rapid.T) {
		e := setup(t)
		e.t = rt
		cfg := &tenurev1.PoolConfig{MaxLeasesPerPeer: rapid.Uint32Range(1, 4).Draw(rt, "cap")}
		lowMin := 0.05
		if rapid.Bool().Draw(rt, "lenient") {
			cfg.MinPeerScore = &lowMin
		}
		if rapid.Bool().Draw(rt, "forgetful") {
			cfg.PeerIdleTimeout = durationpb.New(time.Duration(rapid.Int64Range(1000, 900_000).Draw(rt, "idle_ms")) * time.Millisecond)
		}
		e.create("p", cfg)
		wanted := map[[2]uint32]bool{}
		bits := func(label string, n uint32) []byte {
			b := make([]byte, (n+7)/8)
			for i := uint32(0); i < n; i++ {
				if rapid.Bool().Draw(rt, label) {
					b[i/8] |= 1 << (i % 8)
				}
			}
			return b
		}
		idle := int64(pool.DefaultPeerIdleMs)
		if cfg.PeerIdleTimeout != nil {
			idle = cfg.PeerIdleTimeout.AsDuration().Milliseconds()
		}
		m := idleModel{active: map[string]int64{}, has: map[string]int{}}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		fork := rapid.IntRange(0, steps).Draw(rt, "fork")
		for step := range steps {
			if step == fork {
				e.fork()
			}
			op := rapid.IntRange(0, 6).Draw(rt, "op")
			var self string // the peer of a request or completion
			switch op {
			case 0:
				f := rapid.IntRange(0, 1).Draw(rt, "file")
				b := bits("want", counts[f])
				out := e.do(&logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{
					FileIndex: uint32(f), PieceCount: counts[f], Bits: b}}})
				if out.Err != nil {
					rt.Fatalf("want: %v", out.Err)
				}
				for i := uint32(0); i < counts[f]; i++ {
					if b[i/8]>>(i%8)&1 != 0 {
						wanted[[2]uint32{uint32(f), i}] = true
					}
				}
			case 1, 2:
				peer := rapid.SampledFrom(peers).Draw(rt, "peer")
				self = peer
				var hs []*logpb.PoolHave
				for f, n := range counts {
					if _, ok := e.m.Pools().Status("", "p"); ok != nil {
						break
					}
					st, _ := e.m.Pools().Status("", "p")
					known := false
					for _, fs := range st.Files {
						known = known || fs.Index == uint32(f)
					}
					if known && rapid.Bool().Draw(rt, "hasfile") {
						hs = append(hs, &logpb.PoolHave{FileIndex: uint32(f), Bits: bits("have", n)})
					}
				}
				out := e.do(&logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{
					Peer: peer, Have: hs, Max: rapid.Uint32Range(1, 5).Draw(rt, "max")}}})
				if out.Err != nil {
					rt.Fatalf("request: %v", out.Err)
				}
				if (len(out.Leases) == 0) != (out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_UNSPECIFIED) {
					rt.Fatalf("leases %d with rejection %v", len(out.Leases), out.Rejected)
				}
				for _, g := range out.Leases {
					if hs := haveOf(hs, g.File); hs == nil || hs[g.Piece/8]>>(g.Piece%8)&1 == 0 {
						rt.Fatalf("granted %d/%d the peer does not have", g.File, g.Piece)
					}
				}
			case 3:
				peer := rapid.SampledFrom(peers).Draw(rt, "peer")
				self = peer
				f := uint32(rapid.IntRange(0, 1).Draw(rt, "file"))
				x := rapid.Uint32Range(0, counts[f]-1).Draw(rt, "piece")
				ok := rapid.Bool().Draw(rt, "success")
				why := tenurev1.FailureReason(0)
				if !ok {
					why = tenurev1.FailureReason(rapid.IntRange(1, 4).Draw(rt, "why"))
				}
				holder, _, held := e.m.Pools().Holder("", "p", f, x)
				out := e.complete("p", peer, f, x, ok, why)
				switch {
				case held && holder == peer && out.Err != nil:
					rt.Fatalf("holder's completion: %v", out.Err)
				case !(held && holder == peer) && out.Err == nil:
					rt.Fatalf("completion by a non-holder succeeded")
				}
			case 4:
				e.after(rapid.Int64Range(1, 400_000).Draw(rt, "ms"))
				e.advance()
			case 5:
				// A piece lease released from outside the pool.
				f := uint32(rapid.IntRange(0, 1).Draw(rt, "file"))
				x := rapid.Uint32Range(0, counts[f]-1).Draw(rt, "piece")
				if holder, seq, ok := e.m.Pools().Holder("", "p", f, x); ok {
					l, err := activeByFence(e, pool.Resource("p", f, x), seq)
					if err == nil {
						e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Release{
							Release: &logpb.Release{LeaseId: l.ID, Holder: holder}}})
					}
				}
			case 6:
				// An operator's fresh start for a peer.
				peer := rapid.SampledFrom(peers).Draw(rt, "peer")
				res := e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Rules: pool.ResetRules, Op: &logpb.Command_Pool{Pool: &logpb.PoolCommand{
					Pool: "p", Op: &logpb.PoolCommand_ResetPeer{ResetPeer: &logpb.PoolResetPeer{Peer: peer}}}}})
				if res.Pool == nil || res.Pool.Err != nil {
					rt.Fatalf("reset: %v", res.Outcome.Err)
				}
				if r := res.Pool.Ranking; r.Score != pool.StartScore || r.Successes != 0 || r.Failures != 0 {
					rt.Fatalf("after a reset: %+v", r)
				}
			}
			m.check(rt, e, peers, idle, op <= 3, self)
			if err := e.m.Pools().Check(); err != nil {
				rt.Fatal(err)
			}
			st, err := e.m.Pools().Status("", "p")
			if err != nil {
				rt.Fatal(err)
			}
			var nWanted uint64
			for _, fs := range st.Files {
				nWanted += fs.Wanted + fs.Leased + fs.Done
			}
			if nWanted != uint64(len(wanted)) {
				rt.Fatalf("%d pieces in wanted/leased/done, %d ever wanted", nWanted, len(wanted))
			}
			// Every pool lease is an active registrar lease of its peer.
			for k := range wanted {
				if holder, seq, ok := e.m.Pools().Holder("", "p", k[0], k[1]); ok {
					l, err := activeByFence(e, pool.Resource("p", k[0], k[1]), seq)
					if err != nil || l.State != registrar.Active || l.Holder != holder {
						rt.Fatalf("piece %v: lease %+v %v", k, l, err)
					}
				}
			}
		}
		e.checkReplay()
	})
}

// idleModel follows, from the records, each peer's last activity and how
// many have-maps it has recorded, to check the pool forgets exactly the
// idle peers: those holding no lease, with a have-map, and inactive for
// the idle timeout.
type idleModel struct {
	active map[string]int64 // peer → tick of its last have-map, lease taken or ended
	has    map[string]int   // peer → files with a recorded have-map
	held   map[string]int   // peer → leases held before the last command
	files  map[string]map[uint32]bool
}

// check reads the last step's records; swept says the step was a want,
// request or completion (which forget idle peers but self, its peer).
func (m *idleModel) check(rt *rapid.T, e *env, peers []string, idle int64, swept bool, self string) {
	if m.files == nil {
		m.files = map[string]map[uint32]bool{}
	}
	records := e.last
	e.last = nil // a step that applies nothing leaves no records
	forgot := map[string]bool{}
	for _, s := range records {
		pr := s.Record.GetPool()
		if pr == nil {
			continue
		}
		switch ev := pr.Event.(type) {
		case *logpb.PoolRecord_Have:
			h := ev.Have
			if m.files[h.Peer] == nil {
				m.files[h.Peer] = map[uint32]bool{}
			}
			if h.Idle {
				if m.held[h.Peer] > 0 || s.Record.Tick-m.active[h.Peer] < idle || !m.files[h.Peer][h.FileIndex] {
					rt.Fatalf("forgot %s's have-map of file %d: it holds %d leases, was active at %d (now %d, idle %d)",
						h.Peer, h.FileIndex, m.held[h.Peer], m.active[h.Peer], s.Record.Tick, idle)
				}
				forgot[h.Peer] = true
				delete(m.files[h.Peer], h.FileIndex)
				continue
			}
			m.active[h.Peer] = s.Record.Tick
			m.files[h.Peer][h.FileIndex] = len(h.Pieces) > 0
		case *logpb.PoolRecord_Leased:
			m.active[ev.Leased.Peer] = s.Record.Tick
		case *logpb.PoolRecord_Done:
			m.active[ev.Done.Peer] = s.Record.Tick
		}
	}
	// A want, request or completion forgets every idle peer but its own
	// (fewer than maxForget here): none may be left.
	if swept && len(records) > 0 {
		for _, p := range peers {
			n := 0
			for _, ok := range m.files[p] {
				if ok {
					n++
				}
			}
			if p != self && !forgot[p] && n > 0 && m.held[p] == 0 && e.tick-m.active[p] >= idle && len(e.m.Pools().HeldBy("", "p", p)) == 0 {
				rt.Fatalf("peer %s idle since %d (now %d, idle %d) still has %d have-maps", p, m.active[p], e.tick, idle, n)
			}
		}
	}
	m.held = map[string]int{}
	for _, p := range peers {
		m.held[p] = len(e.m.Pools().HeldBy("", "p", p))
	}
}

func haveOf(hs []*logpb.PoolHave, f uint32) []byte {
	for _, h := range hs {
		if h.FileIndex == f {
			return h.Bits
		}
	}
	return nil
}

func activeByFence(e *env, resource string, seq uint64) (registrar.Lease, error) {
	for _, l := range e.m.Registrar().Active("default", resource, registrar.Tick(e.tick)) {
		if l.Fence == seq {
			return l, nil
		}
	}
	return registrar.Lease{}, registrar.NewError(registrar.ReasonLeaseNotFound, nil, "no active lease %d on %s", seq, resource)
}
