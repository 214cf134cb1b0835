package pool

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Config is a pool's configuration.
type Config struct {
	LeaseMs          int64
	MaxLeasesPerPeer uint32
	Decay            float64 // per hour
	Bonus            float64
	Penalty          float64
	MinScore         float64
	// PeerIdleMs is how long a peer holding no piece lease may go without
	// activity (a have-map recorded, a lease taken or ended) before the
	// pool forgets its have-maps.
	PeerIdleMs int64
}

// diff names the settings of c that other sets otherwise: "max leases per
// peer 4, not 8".
func (c Config) diff(other Config) string {
	var out []string
	add := func(name string, have, asked any) {
		if have != asked {
			out = append(out, fmt.Sprintf("%s %v, not %v", name, have, asked))
		}
	}
	add("lease duration", time.Duration(c.LeaseMs)*time.Millisecond, time.Duration(other.LeaseMs)*time.Millisecond)
	add("max leases per peer", c.MaxLeasesPerPeer, other.MaxLeasesPerPeer)
	add("peer ranking decay", c.Decay, other.Decay)
	add("success bonus", c.Bonus, other.Bonus)
	add("failure penalty", c.Penalty, other.Penalty)
	add("min peer score", c.MinScore, other.MinScore)
	add("peer idle timeout", time.Duration(c.PeerIdleMs)*time.Millisecond, time.Duration(other.PeerIdleMs)*time.Millisecond)
	return "it has " + strings.Join(out, ", ")
}

// Score bounds (seed 004).
const (
	MinScoreClamp = 0.1
	MaxScoreClamp = 10.0
	// StartScore is a new peer's score.
	StartScore = 1.0
)

// Limits.
const (
	MaxFileIndex     = 1<<16 - 1
	MaxPiecesPerFile = 1 << 22
	MaxLeaseMs       = 24 * 3600 * 1000
	MaxLeasesCap     = 1024
	MaxHaveMaps      = 1024
	MaxRanges        = 4096
	MinPeerIdleMs    = 1000
	MaxPeerIdleMs    = 30 * 24 * 3600 * 1000
	// DefaultPeerIdleMs is the default peer idle timeout, 1h.
	DefaultPeerIdleMs = 3600 * 1000
)

// DefaultConfig is seed 004's default.
func DefaultConfig() Config {
	return Config{LeaseMs: 300_000, MaxLeasesPerPeer: 4, Decay: 0.95, Bonus: 0.5, Penalty: 1.0, MinScore: 0.2,
		PeerIdleMs: DefaultPeerIdleMs}
}

// ConfigFromAPI resolves a wire configuration over the defaults.
func ConfigFromAPI(pb *tenurev1.PoolConfig) (Config, error) {
	c := DefaultConfig()
	if pb == nil {
		return c, nil
	}
	if pb.LeaseDuration != nil {
		if err := pb.LeaseDuration.CheckValid(); err != nil {
			return c, invalid("config.lease_duration", "%v", err)
		}
		c.LeaseMs = registrar.Ms(pb.LeaseDuration.AsDuration())
	}
	if pb.MaxLeasesPerPeer != 0 {
		c.MaxLeasesPerPeer = pb.MaxLeasesPerPeer
	}
	if pb.PeerRankingDecay != nil {
		c.Decay = unsigned(*pb.PeerRankingDecay)
	}
	if pb.SuccessBonus != nil {
		c.Bonus = unsigned(*pb.SuccessBonus)
	}
	if pb.FailurePenalty != nil {
		c.Penalty = unsigned(*pb.FailurePenalty)
	}
	if pb.MinPeerScore != nil {
		c.MinScore = unsigned(*pb.MinPeerScore)
	}
	if pb.PeerIdleTimeout != nil {
		if err := pb.PeerIdleTimeout.CheckValid(); err != nil {
			return c, invalid("config.peer_idle_timeout", "%v", err)
		}
		c.PeerIdleMs = registrar.Ms(pb.PeerIdleTimeout.AsDuration())
	}
	return c, c.Validate()
}

// unsigned turns -0 into 0 (it would read "-0" back).
func unsigned(v float64) float64 {
	if v == 0 {
		return 0
	}
	return v
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate checks the configuration's ranges.
func (c Config) Validate() error {
	switch {
	case c.LeaseMs < 1000 || c.LeaseMs > MaxLeaseMs:
		// A duration, refused as a lease's ttl is (and as a namespace's
		// bounds refuse it in create).
		return registrar.NewError(registrar.ReasonTTLOutOfRange, map[string]string{"field": "config.lease_duration",
			"ttl_ms": strconv.FormatInt(c.LeaseMs, 10), "min_ttl_ms": "1000", "max_ttl_ms": strconv.FormatInt(MaxLeaseMs, 10)},
			"config.lease_duration %s is outside [1s, 24h], the limits of any pool (the namespace's ttl bounds, "+
				"checked next, may be narrower)", registrar.Dur(c.LeaseMs))
	case c.MaxLeasesPerPeer < 1 || c.MaxLeasesPerPeer > MaxLeasesCap:
		return invalid("config.max_leases_per_peer", "must be within [1, %d], got %d", MaxLeasesCap, c.MaxLeasesPerPeer)
	case !finite(c.Decay) || c.Decay <= 0 || c.Decay > 1:
		return invalid("config.peer_ranking_decay", "must be within (0, 1], got %v", c.Decay)
	case !finite(c.Bonus) || c.Bonus < 0 || c.Bonus > MaxScoreClamp:
		return invalid("config.success_bonus", "must be within [0, 10], got %v", c.Bonus)
	case !finite(c.Penalty) || c.Penalty < 0 || c.Penalty > MaxScoreClamp:
		return invalid("config.failure_penalty", "must be within [0, 10], got %v", c.Penalty)
	case !finite(c.MinScore) || c.MinScore < 0 || c.MinScore > MaxScoreClamp:
		return invalid("config.min_peer_score", "must be within [0, 10], got %v", c.MinScore)
	case c.PeerIdleMs < MinPeerIdleMs || c.PeerIdleMs > MaxPeerIdleMs:
		return invalid("config.peer_idle_timeout", "must be within [1s, 720h], got %s", registrar.Dur(c.PeerIdleMs))
	}
	return nil
}

// API renders the configuration in wire form.
func (c Config) API() *tenurev1.PoolConfig {
	return &tenurev1.PoolConfig{
		LeaseDuration:    durationpb.New(time.Duration(c.LeaseMs) * time.Millisecond),
		MaxLeasesPerPeer: c.MaxLeasesPerPeer,
		PeerRankingDecay: &c.Decay, SuccessBonus: &c.Bonus, FailurePenalty: &c.Penalty, MinPeerScore: &c.MinScore,
		PeerIdleTimeout: durationpb.New(time.Duration(c.PeerIdleMs) * time.Millisecond),
	}
}

// proto renders the configuration for records and snapshots. The peer
// idle timeout, added after the first release, is left out at its
// default, so that a log written by an earlier binary derives the same
// record bytes on this one (see registrar.Policy.ProtoOver).
func (c Config) proto() *logpb.PoolConfig {
	pb := &logpb.PoolConfig{LeaseMs: c.LeaseMs, MaxLeasesPerPeer: c.MaxLeasesPerPeer,
		Decay: c.Decay, Bonus: c.Bonus, Penalty: c.Penalty, MinScore: c.MinScore}
	if c.PeerIdleMs != DefaultPeerIdleMs {
		pb.PeerIdleMs = c.PeerIdleMs
	}
	return pb
}

func configFromProto(p *logpb.PoolConfig) Config {
	c := Config{LeaseMs: p.GetLeaseMs(), MaxLeasesPerPeer: p.GetMaxLeasesPerPeer(),
		Decay: p.GetDecay(), Bonus: p.GetBonus(), Penalty: p.GetPenalty(), MinScore: p.GetMinScore(), PeerIdleMs: p.GetPeerIdleMs()}
	if c.PeerIdleMs == 0 { // the default, left out (proto)
		c.PeerIdleMs = DefaultPeerIdleMs
	}
	return c
}

// NextScore is seed 004's ranking update: the score after one more
// outcome (successes and failures already counting it), hoursMs after the
// last update. Explicit conversions keep the compiler from fusing
// operations, so every platform computes the same bits.
func NextScore(c Config, score float64, elapsedMs int64, successes, failures uint64) float64 {
	if elapsedMs < 0 {
		elapsedMs = 0
	}
	hours := float64(elapsedMs) / 3_600_000
	tf := math.Pow(c.Decay, hours)
	rate := 1.0
	if n := successes + failures; n > 0 {
		rate = float64(successes) / float64(n)
	}
	s := float64(score*tf) + float64(rate*c.Bonus) - float64((1-rate)*c.Penalty)
	return min(max(s, MinScoreClamp), MaxScoreClamp)
}

func invalid(field, format string, args ...any) error {
	return registrar.NewError(registrar.ReasonInvalidArgument, map[string]string{"field": field},
		"%s: %s", field, fmt.Sprintf(format, args...))
}
