package registrar_test

import "testing"

func TestSmoke(t *testing.T) {
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(5000))
	if l.Fence == 0 || len(l.ID) != 26 {
		t.Fatalf("bad lease %+v", l)
	}
	wantReason(t, e.acquire("orders/42", "w2").Err, "LEASE_HELD")
	if out := e.after(1000).renew(l.ID, nil); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.release(l.ID, "w1"); out.Err != nil || out.AlreadyTerminal {
		t.Fatal(out)
	}
	l2 := e.mustAcquire("orders/42", "w2")
	if l2.Fence <= l.Fence {
		t.Fatalf("fence went backwards")
	}
	t.Logf("%s %d %s", l2.ID, l2.Fence, l2.ExpiresAt)
}
