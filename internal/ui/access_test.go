package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/server"
)

// accessAuthFile: a reader and an admin of every namespace.
const accessAuthFile = `{"tokens":[
 {"token":"tok-reader","principal":"auditor","roles":["reader"],"namespaces":["*"]},
 {"token":"tok-admin","principal":"root","roles":["admin"],"namespaces":["*"]}
]}`

// bearerTransport sends "Authorization: Bearer <token>" on every request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// applyToken types token into the header's Token field and applies it.
func (e *env) applyToken(t *testing.T, token string) {
	t.Helper()
	e.step(t, "apply token "+token, chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#settings button[type=submit]`)))
}

// TestDashboardAccess drives the dashboard against a server that requires
// tokens: without one it says UNAUTHENTICATED and asks for one; it shows
// who a token belongs to, offers a reader no revoke (before any refusal)
// and lets an admin revoke.
func TestDashboardAccess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(accessAuthFile), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Open(path, auth.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e := startServerWith(t, func(c *server.Config) { c.Auth = store })
	admin := tenurev1connect.NewLeaseServiceClient(&http.Client{Timeout: time.Minute,
		Transport: bearerTransport{"tok-admin", http.DefaultTransport}}, e.base)
	ctx := context.Background()
	r, err := admin.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "locked/1", Holder: "w1", Ttl: durationpb.New(2 * time.Minute)}))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	l := r.Msg.Lease
	// The server does refuse the API clients without a token.
	if _, err := e.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.LeaseId})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Get without a token: %v", err)
	}
	e.startBrowser(t)
	t.Cleanup(func() { e.pageErrors(t) })
	row := fmt.Sprintf(`tr[data-lease=%s]`, q(l.LeaseId))

	t.Run("no token", func(t *testing.T) {
		// / leads to the dashboard without credentials too.
		e.step(t, "open /", chromedp.Navigate(e.base+"/"))
		e.waitJS(t, "the dashboard", `location.pathname === "/ui/" && document.querySelector("#whoami")?.dataset.state === "unauthenticated"`)
		e.open(t, "/leases")
		e.waitJS(t, "UNAUTHENTICATED in the header", `(() => { const w = document.querySelector("#whoami");
			return w.dataset.state === "unauthenticated" && w.textContent === "UNAUTHENTICATED" && w.classList.contains("bad") })()`)
		e.waitJS(t, "the prompt for a token", `(() => { const p = document.querySelector("#auth-prompt");
			return !p.hidden && p.textContent.includes("UNAUTHENTICATED") && p.textContent.includes("requires a token") &&
				document.activeElement === document.querySelector("#token") && document.querySelector("#token").classList.contains("attention") })()`)
		e.waitJS(t, "the table's error", `document.querySelector("#lease-body .error")?.textContent.startsWith("unauthenticated:")`)
		e.waitJS(t, "the feed's state", `document.querySelector("#live").textContent === "feed: needs a token" && document.querySelector("#live").classList.contains("bad")`)
		e.screenshot(t, "unauthenticated")
		// A token the server does not know is refused the same way.
		e.applyToken(t, "tok-unknown")
		e.waitJS(t, "the refused token", `document.querySelector("#whoami").dataset.state === "unauthenticated" &&
			document.querySelector("#auth-prompt").textContent.includes("refuses this token")`)
	})

	t.Run("reader", func(t *testing.T) {
		e.applyToken(t, "tok-reader")
		e.waitJS(t, "the reader in the header", `document.querySelector("#me-principal")?.textContent === "auditor" &&
			document.querySelector("#me-roles").textContent === "reader" && document.querySelector("#me-namespaces").textContent === "*" &&
			document.querySelector("#auth-prompt").hidden && !document.querySelector("#token").classList.contains("attention")`)
		e.open(t, "/leases")
		e.waitJS(t, "the lease", fmt.Sprintf(`document.querySelector(%s)?.dataset.state === "active"`, q(row)))
		// Up front: no revoke button was ever offered, and the page says why.
		if n := eval[int](t, e, `document.querySelectorAll("button.revoke").length`); n != 0 {
			t.Fatalf("%d revoke buttons offered to a reader", n)
		}
		e.waitJS(t, "why", `document.querySelector("#admin-refused")?.textContent.includes("auditor (reader; namespaces *) may not revoke in default")`)
		e.open(t, "/lease/"+l.LeaseId)
		e.waitJS(t, "the lease's tree", fmt.Sprintf(`document.querySelector('#tree li[data-lease=%s]') !== null`, q(l.LeaseId)))
		if n := eval[int](t, e, `document.querySelectorAll("button.revoke").length`); n != 0 {
			t.Fatalf("%d revoke buttons on the lease page for a reader", n)
		}
	})

	t.Run("admin", func(t *testing.T) {
		e.applyToken(t, "tok-admin")
		e.waitJS(t, "the admin in the header", `document.querySelector("#me-principal")?.textContent === "root" && document.querySelector("#me-roles").textContent === "admin"`)
		e.open(t, "/leases")
		btn := chromedp.CSS(row + " button.revoke")
		e.step(t, "revoke", chromedp.WaitVisible(btn), chromedp.Click(btn), chromedp.WaitVisible(chromedp.ID("confirm-ok")),
			chromedp.Click(chromedp.ID("confirm-ok")))
		e.waitJS(t, "the server's answer", `document.querySelector("#lease-message .notice")?.textContent.includes("Revoked locked/1")`)
		got, err := admin.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.LeaseId}))
		if err != nil {
			t.Fatal(err)
		}
		if got.Msg.Lease.State != tenurev1.State_STATE_REVOKED {
			t.Fatalf("after the admin's revoke from the dashboard: %v", got.Msg.Lease.State)
		}
		e.waitJS(t, "the revoked row", fmt.Sprintf(`document.querySelector(%s)?.dataset.state === "revoked"`, q(row)))
		e.screenshot(t, "signed-in")
	})

	t.Run("token revoked", func(t *testing.T) {
		// The admin's token leaves the auth file: once the server reloads
		// it, the header stops naming the admin (found from outside: the
		// feed said it needed a token, the header still said root).
		if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"tok-reader","principal":"auditor","roles":["reader"],"namespaces":["*"]}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := store.Reload(); err != nil {
			t.Fatal(err)
		}
		e.waitJS(t, "UNAUTHENTICATED in the header", `(() => { const w = document.querySelector("#whoami");
			return w.dataset.state === "unauthenticated" && w.textContent === "UNAUTHENTICATED" &&
				document.querySelector("#auth-prompt").textContent.includes("refuses this token") })()`)
	})
}

// TestDashboardOneNamespace: a principal confined to one namespace sees
// that one when the address names none; a page of a namespace it may not
// use says so once, and does not ask again until Apply.
func TestDashboardOneNamespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[
 {"token":"tok-team","principal":"teamer","roles":["reader"],"namespaces":["team-a"]},
 {"token":"tok-ops","principal":"ops","roles":["admin"],"namespaces":["*"]}
]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Open(path, auth.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e := startServerWith(t, func(c *server.Config) { c.Auth = store })
	e.token = "tok-ops" // the test's reads of /metrics
	e.startBrowser(t)
	t.Cleanup(func() { e.pageErrors(t) })

	e.open(t, "/leases")
	e.applyToken(t, "tok-team")
	e.waitJS(t, "team-a from the principal", `location.hash === "#/leases?ns=team-a" && document.querySelector("h1")?.textContent === "Leases in team-a" &&
		document.querySelector("#namespace").value === "team-a" && document.querySelector("#lease-body .empty") !== null`)
	e.open(t, "/")
	e.waitJS(t, "team-a on another page", `location.hash === "#/?ns=team-a" && document.querySelector("#counts h2")?.textContent === "Leases in team-a"`)

	// Default, which the token may not use: refused once, not polled.
	list := func() float64 {
		return e.metric(t, "tenure_rpc_requests_total", "procedure", "/tenure.v1.LeaseService/List", "code", "permission_denied")
	}
	watch := func() float64 {
		return e.metric(t, "tenure_rpc_requests_total", "procedure", "/tenure.v1.LeaseService/Watch", "code", "permission_denied")
	}
	status := func() float64 {
		return e.metric(t, "tenure_rpc_requests_total", "procedure", "/tenure.v1.ClusterService/Status", "code", "ok")
	}
	e.open(t, "/leases?ns=default")
	e.waitJS(t, "the refusal", `document.querySelector("#lease-body .error")?.textContent.startsWith("permission_denied:") &&
		document.querySelector("#live").textContent === "feed: not allowed"`)
	refusedList, refusedWatch := list(), watch()
	// The page keeps asking for the cluster's status every 3 s (the
	// leader banner); three more such calls span more than the table's
	// 3 s refresh and the feed's first retry.
	since := status()
	waitUntil(t, "three more Status calls", func() bool { return status() >= since+3 })
	if n, w := list(), watch(); n != refusedList || w != refusedWatch {
		t.Errorf("refused List %v → %v, Watch %v → %v times while the page stayed: it keeps asking", refusedList, n, refusedWatch, w)
	}
	// Apply asks again.
	e.step(t, "apply", chromedp.Click(chromedp.CSS(`#settings button[type=submit]`)))
	waitUntil(t, "the List asked again", func() bool { return list() > refusedList })
}
