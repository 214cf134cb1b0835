package server

import (
	"net/http"
	"strings"
	"testing"
)

// What docs/api-additions.md says of Connect JSON answers and of Claim's
// wait: zeros are written, but not a message field (a timestamp, a
// duration) that is not set; a wait longer than MaxClaimWait is refused.
func TestConnectJSONLeavesUnsetMessagesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	has := func(t *testing.T, what string, m map[string]any, present, absent []string) {
		t.Helper()
		for _, k := range present {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %s: %v", what, k, m)
			}
		}
		for _, k := range absent {
			if v, ok := m[k]; ok {
				t.Errorf("%s has %s: %v", what, k, v)
			}
		}
	}
	code, out := b.postJSON(t, "LeaseService/Acquire", `{"resource":"json/1","holder":"w1"}`)
	if code != http.StatusOK {
		t.Fatalf("acquire: %d %v", code, out)
	}
	has(t, "an active lease", out["lease"].(map[string]any), []string{"renewalCount", "endedByLeaseId", "issuedAt", "ttl"},
		[]string{"terminatedAt", "lastRenewedAt", "graceUntil", "releaseReason"})

	if code, out = b.postJSON(t, "QueueService/Enqueue", `{"queue":"jq","tasks":[{"payload":"eA=="}]}`); code != http.StatusOK {
		t.Fatalf("enqueue: %d %v", code, out)
	}
	has(t, "a queued task", out["tasks"].([]any)[0].(map[string]any), []string{"attempts", "notBefore", "createdAt"}, []string{"claimedAt", "completedAt"})
	if code, out = b.postJSON(t, "QueueService/Claim", `{"queue":"jq","worker":"w1"}`); code != http.StatusOK {
		t.Fatalf("claim: %d %v", code, out)
	}
	has(t, "a leased task", out["tasks"].([]any)[0].(map[string]any), []string{"claimedAt", "lease"}, []string{"notBefore", "completedAt"})

	code, out = b.postJSON(t, "QueueService/Claim", `{"queue":"jq","worker":"w1","wait":"301s"}`)
	if msg, _ := out["message"].(string); code != http.StatusBadRequest || errorReason(t, out) != "INVALID_ARGUMENT" ||
		!strings.HasPrefix(msg, "INVALID_ARGUMENT: wait: must be between 0 and 5m0s") || MaxClaimWait.String() != "5m0s" {
		t.Fatalf("claim waiting 301s: %d %v", code, out)
	}
}
