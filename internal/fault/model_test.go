package fault

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checkers must reject the histories the guarantees rule out: each
// case below is one synthetic history that breaks one guarantee, next to
// a good one that differs only where it matters.

const ms = int64(time.Millisecond)

func acq(client int, res, id string, fence uint64, issued, call, ret int64) Op {
	return Op{Client: client, Kind: KindAcquire, Resource: res, Holder: "h", TTLms: 1000, Outcome: OK,
		NewLease: id, Fence: fence, IssuedTick: issued, ExpiresTick: issued + 1000, Call: call * ms, Return: ret * ms}
}

func linearizable(ops []Op) bool {
	return porcupine.CheckOperations(Model(), Operations(ops))
}

func TestModelAcceptsAGoodHistory(t *testing.T) {
	ops := []Op{
		acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 1, Kind: KindAcquire, Resource: "r", Holder: "x", TTLms: 1000, Outcome: Failed, Reason: "LEASE_HELD", HeldBy: "A", Call: 20 * ms, Return: 30 * ms},
		{Client: 0, Kind: KindWrite, Resource: "r", LeaseID: "A", Expected: 0, Data: "d1", Outcome: OK, Epoch: 1, Call: 40 * ms, Return: 50 * ms},
		{Client: 0, Kind: KindRenew, Resource: "r", LeaseID: "A", TTLms: 1000, Outcome: OK, ExpiresTick: 1200, Call: 60 * ms, Return: 70 * ms},
		{Client: 0, Kind: KindRelease, Resource: "r", LeaseID: "A", Outcome: OK, Call: 80 * ms, Return: 90 * ms},
		acq(1, "r", "B", 2, 300, 100, 110),
		{Client: 1, Kind: KindRead, Resource: "r", Outcome: OK, Epoch: 1, OutData: "d1", Call: 120 * ms, Return: 130 * ms},
		// Unknown outcomes: a write that may have happened, then a read
		// that saw it.
		{Client: 1, Kind: KindWrite, Resource: "r", LeaseID: "B", Expected: 1, Data: "d2", Outcome: Unknown, Call: 140 * ms, Return: 150 * ms},
		{Client: 2, Kind: KindRead, Resource: "r", Outcome: OK, Epoch: 2, OutData: "d2", Call: 160 * ms, Return: 170 * ms},
	}
	if !linearizable(ops) {
		t.Fatal("a good history was rejected")
	}
	if v := CheckGrants(ops); len(v) > 0 {
		t.Fatalf("a good history has violations: %v", v)
	}
}

func TestModelRejectsDoubleGrant(t *testing.T) {
	// B is granted at tick 500 while A (ticks 100..1100) was neither
	// released nor expired.
	ops := []Op{acq(0, "r", "A", 1, 100, 0, 10), acq(1, "r", "B", 2, 500, 20, 30)}
	if linearizable(ops) {
		t.Fatal("double grant accepted by the model")
	}
	if v := CheckGrants(ops); len(v) == 0 || !strings.Contains(v[0], "before lease A") {
		t.Fatalf("double grant not reported by the direct check: %v", v)
	}
	// The same after A's expiry tick is fine for the model.
	if !linearizable([]Op{acq(0, "r", "A", 1, 100, 0, 10), acq(1, "r", "B", 2, 1100, 20, 1030)}) {
		t.Fatal("a grant at the previous lease's expiry tick was rejected")
	}
}

func TestCheckRejectsEarlyExpiry(t *testing.T) {
	// Registrar ticks say A expired (the model cannot tell), but B was
	// granted 500 ms of real time after A was sent with ttl 1 s.
	ops := []Op{acq(0, "r", "A", 1, 100, 0, 10), acq(1, "r", "B", 2, 1100, 490, 500)}
	if v := CheckGrants(ops); len(v) != 1 || !strings.Contains(v[0], "could expire") {
		t.Fatalf("early re-grant not reported: %v", v)
	}
	// A renewal that failed as expired 400 ms after the grant was sent.
	ops = []Op{acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindRenew, Resource: "r", LeaseID: "A", TTLms: 1000, Outcome: Failed, Reason: "LEASE_EXPIRED", Call: 390 * ms, Return: 400 * ms}}
	if v := CheckGrants(ops); len(v) != 1 || !strings.Contains(v[0], "LEASE_EXPIRED") {
		t.Fatalf("early expiry of a renewal not reported: %v", v)
	}
	// Released first: no violation.
	ops = []Op{acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindRelease, Resource: "r", LeaseID: "A", Outcome: OK, Call: 100 * ms, Return: 110 * ms},
		acq(1, "r", "B", 2, 300, 200, 210)}
	if v := CheckGrants(ops); len(v) != 0 {
		t.Fatalf("a grant after a release reported: %v", v)
	}
}

func TestCheckRejectsFenceGoingBackwards(t *testing.T) {
	ops := []Op{acq(0, "r", "A", 5, 100, 0, 10), acq(1, "r", "B", 3, 1200, 2000, 2010)}
	if v := CheckGrants(ops); len(v) == 0 || !strings.Contains(v[0], "fence went backwards") {
		t.Fatalf("fence going backwards not reported: %v", v)
	}
	if linearizable(ops) {
		t.Fatal("fence going backwards accepted by the model")
	}
	dup := []Op{acq(0, "r", "A", 5, 100, 0, 10), acq(1, "r", "B", 5, 1200, 2000, 2010)}
	if v := CheckGrants(dup); len(v) == 0 || !strings.Contains(v[0], "granted twice") {
		t.Fatalf("a fence granted twice not reported: %v", v)
	}
}

func TestModelRejectsLostWrite(t *testing.T) {
	ops := []Op{
		acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindWrite, Resource: "r", LeaseID: "A", Expected: 0, Data: "d1", Outcome: OK, Epoch: 1, Call: 20 * ms, Return: 30 * ms},
		{Client: 1, Kind: KindRead, Resource: "r", Outcome: OK, Epoch: 0, Call: 40 * ms, Return: 50 * ms},
	}
	if linearizable(ops) {
		t.Fatal("a read that missed an acknowledged write was accepted")
	}
}

func TestModelRejectsZombieRenewalAndWrongHolder(t *testing.T) {
	// A renewal applied at tick 1500 of a lease that expired at 1100.
	zombie := []Op{acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindRenew, Resource: "r", LeaseID: "A", TTLms: 1000, Outcome: OK, ExpiresTick: 2500, Call: 20 * ms, Return: 30 * ms}}
	if linearizable(zombie) {
		t.Fatal("a renewal after expiry was accepted")
	}
	// LEASE_HELD naming a lease that was released.
	held := []Op{acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindRelease, Resource: "r", LeaseID: "A", Outcome: OK, Call: 20 * ms, Return: 30 * ms},
		{Client: 1, Kind: KindAcquire, Resource: "r", Holder: "x", TTLms: 1000, Outcome: Failed, Reason: "LEASE_HELD", HeldBy: "A", Call: 40 * ms, Return: 50 * ms}}
	if linearizable(held) {
		t.Fatal("LEASE_HELD by a released lease was accepted")
	}
	// A renewal of the live holder that answers LEASE_NOT_FOUND: a lost lease.
	lost := []Op{acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindRenew, Resource: "r", LeaseID: "A", TTLms: 1000, Outcome: Failed, Reason: "LEASE_NOT_FOUND", Call: 20 * ms, Return: 30 * ms}}
	if linearizable(lost) {
		t.Fatal("a live lease that was not found was accepted")
	}
}

func TestModelTreatsUnknownGrantAsPossible(t *testing.T) {
	// An acquire of unknown outcome may have granted a lease nobody knows:
	// a later LEASE_HELD naming it is fine, and so is nothing happening.
	unknown := Op{Client: 0, Kind: KindAcquire, Resource: "r", Holder: "h", TTLms: 1000, Outcome: Unknown, Call: 0, Return: 10 * ms}
	ops := []Op{unknown,
		{Client: 1, Kind: KindAcquire, Resource: "r", Holder: "x", TTLms: 1000, Outcome: Failed, Reason: "LEASE_HELD", HeldBy: "Z", Call: 40 * ms, Return: 50 * ms},
		acq(1, "r", "B", 7, 5000, 6000, 6010)}
	if !linearizable(ops) {
		t.Fatal("an unknown acquire that happened was rejected")
	}
	if !linearizable([]Op{unknown, acq(1, "r", "B", 1, 100, 20, 30)}) {
		t.Fatal("an unknown acquire that did not happen was rejected")
	}
	// Whatever it did, a second grant overlapping B is still caught.
	if linearizable([]Op{unknown, acq(1, "r", "B", 1, 100, 20, 30), acq(2, "r", "C", 2, 600, 40, 50)}) {
		t.Fatal("an overlapping grant was accepted next to an unknown one")
	}
}

// A transfer refused with INVALID_ARGUMENT (to the lease's own holder)
// says nothing about the lease: the holder's lease stays live, and the
// next grant still waits for its expiry (found by CI: the model read the
// refusal as the lease being gone, and rejected a good history).
func TestModelTransferRefusedAsInvalid(t *testing.T) {
	ops := []Op{
		acq(0, "r", "A", 1, 100, 0, 10),
		{Client: 0, Kind: KindTransfer, Resource: "r", LeaseID: "A", To: "h", TTLms: 1000, Outcome: Failed, Reason: "INVALID_ARGUMENT", Call: 20 * ms, Return: 30 * ms},
		acq(1, "r", "B", 2, 1100, 40, 1050),
	}
	if !linearizable(ops) {
		t.Fatal("a transfer refused as invalid made a good history illegal")
	}
	if linearizable([]Op{ops[0], ops[1], acq(1, "r", "B", 2, 500, 40, 50)}) {
		t.Fatal("a grant during the holder's lease accepted after an invalid transfer")
	}
}
