package registrar_test

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/registrar"
)

const crockfordAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Lease ids: 26 characters of Crockford base32 carrying the issue wall
// time, the cluster tag and the sequence (= fence); unique and never
// reused (INV-0301).
func TestLeaseID_FormatAndRoundTrip_INV0301(t *testing.T) {
	t.Parallel()
	e := setup(t)
	seen := map[string]bool{}
	var prev string
	for i := 0; i < 50; i++ {
		l := e.after(int64(i%3)).mustAcquire("r/"+string(rune('a'+i%26))+string(rune('a'+i/26)), "w1")
		if len(l.ID) != registrar.LeaseIDLen || registrar.LeaseIDLen != 26 {
			t.Fatalf("id %q has %d chars", l.ID, len(l.ID))
		}
		for _, c := range l.ID {
			if !strings.ContainsRune(crockfordAlphabet, c) {
				t.Fatalf("id %q has %q", l.ID, c)
			}
		}
		if seen[l.ID] {
			t.Fatalf("id %s issued twice", l.ID)
		}
		seen[l.ID] = true
		wall, tag, seq, err := registrar.ParseLeaseID(l.ID)
		if err != nil || wall != l.IssuedAt.UnixMilli() || tag != e.m.Registrar().IDTag() || seq != l.Fence {
			t.Fatalf("parse %s: wall %d tag %d seq %d err %v; lease %+v", l.ID, wall, tag, seq, err, l)
		}
		if again := registrar.FormatLeaseID(wall, tag, seq); again != l.ID {
			t.Fatalf("format(parse(%s)) = %s", l.ID, again)
		}
		// Ids sort by issue order.
		if prev != "" && l.ID <= prev {
			t.Fatalf("id %s sorts before the earlier %s", l.ID, prev)
		}
		prev = l.ID
	}
}

func TestLeaseID_ParseRejects(t *testing.T) {
	t.Parallel()
	good := registrar.FormatLeaseID(wallBase, 0xBEEF, 42)
	cases := []struct {
		name string
		id   string
	}{
		{"empty", ""},
		{"short", good[:25]},
		{"long", good + "0"},
		{"letter_U", good[:25] + "U"},
		{"punctuation", good[:10] + "-" + good[11:]},
		{"first_char_overflows_128_bits", "8" + good[1:]},
		{"non_ascii", good[:24] + "é"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, _, err := registrar.ParseLeaseID(c.id); err == nil {
				t.Fatalf("parsed %q", c.id)
			}
		})
	}
	// Extremes round-trip.
	for _, v := range []struct {
		wall int64
		tag  uint16
		seq  uint64
	}{{0, 0, 0}, {1<<48 - 1, 0xFFFF, ^uint64(0)}, {wallBase, 1, 1}} {
		id := registrar.FormatLeaseID(v.wall, v.tag, v.seq)
		w, tg, s, err := registrar.ParseLeaseID(id)
		if err != nil || w != v.wall || tg != v.tag || s != v.seq {
			t.Fatalf("%+v → %s → %d %d %d %v", v, id, w, tg, s, err)
		}
	}
}

// A forged id with a known sequence but another time part (or tag) is not
// found, by any operation.
func TestLeaseID_ForgedIsNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	wall, tag, seq, _ := registrar.ParseLeaseID(l.ID)
	for name, id := range map[string]string{
		"earlier_time": registrar.FormatLeaseID(wall-1, tag, seq),
		"later_time":   registrar.FormatLeaseID(wall+60_000, tag, seq),
		"other_tag":    registrar.FormatLeaseID(wall, tag^1, seq),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.m.Registrar().Get(id, e.tick)
			wantReason(t, err, registrar.ReasonLeaseNotFound)
			vr, _ := e.m.Registrar().Verify([]string{id}, e.tick)
			if vr[0].Found {
				t.Fatal("verify found a forged id")
			}
			e.unchanged(func() {
				wantReason(t, e.renew(id, nil).Err, registrar.ReasonLeaseNotFound)
				wantReason(t, e.release(id, "w1").Err, registrar.ReasonLeaseNotFound)
				wantReason(t, e.revoke(id, "").Err, registrar.ReasonLeaseNotFound)
				wantReason(t, e.transfer(id, "w1", "w2", nil).Err, registrar.ReasonLeaseNotFound)
				wantReason(t, e.writeState("orders/42", id, 0, nil).Err, registrar.ReasonLeaseViolation)
			})
		})
	}
	if got := e.get(l.ID); got.State != registrar.Active {
		t.Fatalf("real lease %+v", got)
	}
}
